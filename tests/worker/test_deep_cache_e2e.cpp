// --set deep_cache_interval=N / deep_cache_branch=K end to end (issue 28): DeepCache decides from the step alone, so
// an image is the same alone, in a batch and on any rank; both settings are in the record, the infotext and resume's
// identity; the run's summary counts the UNet calls and the shallow ones; a family without DeepCache, an interval
// below 1 and a branch past the UNet's blocks are refused in one line. (Parity with DeepCache 0.1.1 on diffusers, bit
// for bit: PipelineParity's deepcache/ cases.)
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// Three prompts (one with a negative prompt, one empty) under CFG, whose [uncond; cond] rows share the UNet call:
// alone, batched and on three ranks alike, for SD (PNDM, whose repeated timestep shares a position) and SDXL.
TEST(DeepCacheE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  for (const char* model : {"tiny-sd1", "tiny-sdxl"}) {
    SCOPED_TRACE(model);
    TempDir dir;
    write_file(dir.file("p.jsonl"),
               json({{"prompt", "a photograph of an astronaut riding a horse"}, {"negative_prompt", "blurry"},
                     {"seed", 5}})
                       .dump() +
                   "\n" + json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                   json({{"prompt", "a red cube"}, {"seed", 7}}).dump() + "\n");
    expect_batch_and_rank_independence(dir,
                                       {dir.file("p.jsonl"), "--model", kPipelines + model, "--steps", "10", "--width",
                                        "32", "--height", "32", "--set", "deep_cache_interval=3", "--set",
                                        "deep_cache_branch=4"},
                                       kEnv);
  }
}

TEST(DeepCacheE2E, TheSettingsArePartOfTheImageAndOnlyTheUNetFamiliesTakeThem) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  auto generate = [&](const std::string& model, const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kPipelines + model,
                                     "--steps", "10", "--width", "32", "--height", "32", "--out", dir.file(out)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 300s);
  };
  ASSERT_EQ(generate("tiny-sd1", "plain", {}).exit_code, 0);
  EXPECT_EQ(read_jsonl(dir.file("plain/metadata.jsonl")).at(0)["deep_cache_interval"], 1);  // off by default
  EXPECT_EQ(read_jsonl(dir.file("plain/metadata.jsonl")).at(0)["deep_cache_branch"], 0);
  RunResult cached = generate("tiny-sd1", "cached", {"--set", "deep_cache_interval=3", "--set", "deep_cache_branch=4"});
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  const DecodedPng image = read_png(dir.file("cached/000000.png"));
  EXPECT_NE(image.pixels, read_png(dir.file("plain/000000.png")).pixels);
  EXPECT_TRUE(contains(image.texts.at("parameters"), ", DeepCache interval: 3, DeepCache branch: 4"))
      << image.texts.at("parameters");
  const json row = read_jsonl(dir.file("cached/metadata.jsonl")).at(0);
  EXPECT_EQ(row["deep_cache_interval"], 3);
  EXPECT_EQ(row["deep_cache_branch"], 4);
  // The summary counts UNet calls per image: PNDM's 10 steps are 11 calls at positions 0, 1, 1, 3, ..., 10 (the
  // repeated timestep shares its first position, as DeepCache's list.index gives it), so interval 3 runs the whole
  // UNet at 0, 3, 6 and 9 and the shallow branch in the other 7, as the fp32_seed_1_steps_10_dc_3_4 golden recorded.
  const json summary = json::parse(read_file(dir.file("cached/run.json")))["summary"];
  EXPECT_EQ(summary["denoiser_calls"], 11) << summary.dump();
  EXPECT_EQ(summary["denoiser_calls_cached"], 7) << summary.dump();
  EXPECT_EQ(summary["step_cache"], "DeepCache") << summary.dump();
  EXPECT_TRUE(contains(cached.err, "DeepCache: 7 of 11 denoiser calls (63.6%) ran only the shallow branch"))
      << cached.err;
  EXPECT_FALSE(json::parse(read_file(dir.file("plain/run.json")))["summary"].contains("denoiser_calls"));

  // Resume: another interval, or another branch, is another image.
  RunResult resume = generate("tiny-sd1", "plain", {"--set", "deep_cache_interval=2"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with deep_cache_interval 1")) << resume.err;
  RunResult branch = generate("tiny-sd1", "cached", {"--set", "deep_cache_interval=3", "--set", "deep_cache_branch=0"});
  EXPECT_EQ(branch.exit_code, 2) << branch.err;
  EXPECT_TRUE(contains(branch.err, "made with deep_cache_branch 4")) << branch.err;

  // Bad values: one line, exit 2, before any image.
  int refusals = 0;
  const auto refused = [&](const std::string& model, const std::string& set, const std::string& why) {
    RunResult r = generate(model, "refused-" + std::to_string(++refusals), {"--set", set});
    EXPECT_EQ(r.exit_code, 2) << model << " " << set << ": " << r.err;
    EXPECT_TRUE(contains(r.err, why)) << model << " " << set << ": " << r.err;
  };
  refused("tiny-sd1", "deep_cache_interval=0", "deep_cache_interval");
  refused("tiny-sdxl", "deep_cache_interval=-3", "deep_cache_interval");
  // tiny-sd1 has two down blocks: branches 0..5.
  refused("tiny-sd1", "deep_cache_branch=6", "deep_cache_branch 6: this UNet has 2 down blocks, so DeepCache's "
                                            "branches are 0..5");
  for (const char* model : {"tiny-flux-dev", "tiny-sd3", "tiny-qwen-image"})
    refused(model, "deep_cache_interval=3", "only of Stable Diffusion and Stable Diffusion XL models");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

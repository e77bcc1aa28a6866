// --set first_block_cache=T end to end (issue 28): diffusers decides per batch, dpinfer per image, so an image is
// the same alone, in a batch and on any rank; the threshold is in the record, the infotext and resume's identity;
// a family diffusers' First Block Cache does not serve refuses it in one line. (Parity with diffusers, bit for
// bit at a batch of one: PipelineParity's fbcache/ cases.)
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


// Three prompts, one with true CFG (the "uncond" context), at a threshold that skips some steps of the tiny
// transformer and not others (make_first_block_cache_pipelines.py): alone, batched and on three ranks alike.
TEST(FirstBlockCacheE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             json({{"prompt", "a photograph of an astronaut riding a horse"}, {"negative_prompt", "blurry"},
                   {"seed", 5}, {"settings", {{"true_cfg_scale", 2.0}}}})
                     .dump() +
                 "\n" + json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                 json({{"prompt", "a red cube"}, {"seed", 7}}).dump() + "\n");
  expect_batch_and_rank_independence(dir,
                                     {dir.file("p.jsonl"), "--model", kPipelines + "tiny-flux-dev", "--steps", "20",
                                      "--width", "16", "--height", "16", "--set", "first_block_cache=0.3"},
                                     kEnv);
}

TEST(FirstBlockCacheE2E, TheThresholdIsPartOfTheImageAndOnlyItsFamiliesTakeIt) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  auto generate = [&](const std::string& model, const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kPipelines + model,
                                     "--steps", "20", "--out", dir.file(out)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 300s);
  };
  ASSERT_EQ(generate("tiny-qwen-image", "plain", {}).exit_code, 0);
  RunResult cached = generate("tiny-qwen-image", "cached", {"--set", "first_block_cache=1"});
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  const DecodedPng image = read_png(dir.file("cached/000000.png"));
  EXPECT_NE(image.pixels, read_png(dir.file("plain/000000.png")).pixels);
  EXPECT_TRUE(contains(image.texts.at("parameters"), ", First block cache: 1")) << image.texts.at("parameters");
  EXPECT_EQ(read_jsonl(dir.file("cached/metadata.jsonl")).at(0)["first_block_cache"], 1.0);
  // The run's summary counts the calls, per image and cache context: 20 steps, the prompt only (no negative);
  // the fp32 golden at this threshold skips 20 of 40 with true CFG, so some skip here too.
  const json summary = json::parse(read_file(dir.file("cached/run.json")))["summary"];
  EXPECT_EQ(summary["denoiser_calls"], 20) << summary.dump();
  EXPECT_GT(summary["denoiser_calls_cached"].get<int>(), 0) << summary.dump();
  EXPECT_LT(summary["denoiser_calls_cached"].get<int>(), 20) << summary.dump();
  EXPECT_TRUE(contains(cached.err, "First Block Cache: ")) << cached.err;
  EXPECT_TRUE(contains(cached.err, " denoiser calls (")) << cached.err;
  EXPECT_FALSE(json::parse(read_file(dir.file("plain/run.json")))["summary"].contains("denoiser_calls"));

  RunResult resume = generate("tiny-qwen-image", "plain", {"--set", "first_block_cache=1"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with first_block_cache 0.0")) << resume.err;

  for (const char* model : {"tiny-sd3", "tiny-chroma", "tiny-z-image", "tiny-sd1"}) {
    RunResult refused = generate(model, std::string("refused-") + model, {"--set", "first_block_cache=0.2"});
    EXPECT_EQ(refused.exit_code, 2) << model << ": " << refused.err;
    EXPECT_TRUE(contains(refused.err, "first_block_cache")) << refused.err;
    EXPECT_TRUE(contains(refused.err, "only of Qwen-Image and FLUX.1 models")) << refused.err;
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

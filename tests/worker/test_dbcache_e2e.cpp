// --set dbcache=T (cache-dit's DBCache, with taylorseer_order its TaylorSeer) end to end (issue 28), on FLUX.1,
// Qwen-Image, Chroma, Z-Image and SD3: cache-dit decides per batch, dpinfer per image, so an image is the same alone, in
// a batch and on any rank; the options are
// in the record, the infotext and resume's identity; --offload blocks changes no pixel; bad values, a family without
// DBCache, DBCache with First Block Cache, options without DBCache and an Fn + Bn the transformer cannot split are
// refused in one line. (Parity with cache-dit, bit for bit at a batch of one: PipelineParity's dbcache/ cases.)
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/image_compare.h"
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

// Three prompts, one with true CFG (the "uncond" state), at options that skip some steps of the tiny transformers
// and not others (make_dbcache_pipelines.py's), with TaylorSeer: alone, batched and on three ranks alike.
void expect_independence(const std::string& model, const json& first_settings, const std::vector<std::string>& settings,
                         const std::string& first_prompt = "a photograph of an astronaut riding a horse") {
  TempDir dir;
  json first = {{"prompt", first_prompt}, {"negative_prompt", "blurry"}, {"seed", 5}};
  if (!first_settings.empty()) first["settings"] = first_settings;
  write_file(dir.file("p.jsonl"),
             first.dump() +
                 "\n" + json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                 json({{"prompt", "a red cube"}, {"seed", 7}}).dump() + "\n");
  std::vector<std::string> args = {dir.file("p.jsonl"), "--model", kPipelines + model, "--steps", "20",
                                   "--width", "16", "--height", "16"};
  for (const std::string& s : settings) args.insert(args.end(), {"--set", s});
  expect_batch_and_rank_independence(dir, args, kEnv);
}

TEST(DBCacheE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  expect_independence("tiny-flux-dev", {{"true_cfg_scale", 2.0}}, {"dbcache=0.25", "dbcache_fn=1", "dbcache_warmup=3", "taylorseer_order=1"});
}

TEST(DBCacheE2E, AQwenImageDoesNotDependOnItsBatchOrRank) {
  // Qwen-Image's true_cfg_scale is the guidance scale (4 by default): the negative prompt turns true CFG on for the
  // first line only.
  expect_independence("tiny-qwen-image", json::object(), {"dbcache=0.95", "dbcache_fn=1", "dbcache_warmup=3",
                                          "dbcache_max_continuous=3", "taylorseer_order=2"});
}

TEST(DBCacheE2E, AChromaImageDoesNotDependOnItsBatchOrRank) {
  // Chroma's CFG (guidance 5 by default) runs for every line, on its negative prompt or "": both states, and its
  // two block lists cached apart.
  expect_independence("tiny-chroma-alt", json::object(), {"dbcache=0.97", "dbcache_fn=1", "dbcache_warmup=3",
                                                          "taylorseer_order=1"});
}

TEST(DBCacheE2E, AZImageDoesNotDependOnItsBatchOrRank) {
  // Z-Image runs an image's prompt and negative rows in one call, and cache-dit decides once for the call: dpinfer
  // decides per image from its two rows. The first prompt is long enough (over 32 tokens) that its caption is padded
  // to 64 where the others' are to 32: the batch pads every row to 64, and each image reads only its own length.
  expect_independence("tiny-z-image", json::object(), {"dbcache=0.95", "dbcache_fn=1", "dbcache_warmup=3",
                                                       "taylorseer_order=2"},
                      "a photograph of an astronaut riding a horse across a wide green meadow under a pale blue "
                      "sky, with mountains far behind and a small red barn beside a quiet river");
}

TEST(DBCacheE2E, AnSD3ImageDoesNotDependOnItsBatchOrRank) {
  // SD3 batches CFG as [negatives, prompts] in one call, and cache-dit decides once for the call: dpinfer decides per
  // image from its rows j and B + j. Bn 0 puts the last block (context_pre_only: no text stream out) in the middle.
  expect_independence("tiny-sd3.5", json::object(), {"dbcache=0.5", "dbcache_fn=1", "dbcache_warmup=3",
                                                     "taylorseer_order=2"});
}

TEST(DBCacheE2E, TheOptionsArePartOfTheImageAndOnlyItsFamiliesTakeThem) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  auto generate = [&](const std::string& model, const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kPipelines + model,
                                     "--steps", "20", "--out", dir.file(out)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 300s);
  };
  const std::vector<std::string> cached_args = {"--set", "dbcache=0.95", "--set", "dbcache_fn=1", "--set",
                                                "dbcache_warmup=3", "--set", "taylorseer_order=1"};
  ASSERT_EQ(generate("tiny-qwen-image", "plain", {}).exit_code, 0);
  RunResult cached = generate("tiny-qwen-image", "cached", cached_args);
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  const DecodedPng image = read_png(dir.file("cached/000000.png"));
  EXPECT_NE(image.pixels, read_png(dir.file("plain/000000.png")).pixels);
  const std::string& infotext = image.texts.at("parameters");
  EXPECT_TRUE(contains(infotext, ", DBCache: 0.95, DBCache Fn: 1, DBCache warmup: 3, TaylorSeer order: 1")) << infotext;
  EXPECT_FALSE(contains(infotext, "DBCache Bn")) << infotext;  // the defaults stay out
  const json row = read_jsonl(dir.file("cached/metadata.jsonl")).at(0);
  EXPECT_EQ(row["dbcache"], 0.95);
  EXPECT_EQ(row["dbcache_fn"], 1);
  EXPECT_EQ(row["dbcache_bn"], 0);
  EXPECT_EQ(row["dbcache_warmup"], 3);
  EXPECT_EQ(row["dbcache_max_cached"], -1);
  EXPECT_EQ(row["dbcache_max_continuous"], -1);
  EXPECT_EQ(row["taylorseer_order"], 1);
  EXPECT_EQ(read_jsonl(dir.file("plain/metadata.jsonl")).at(0)["dbcache"], 0.0);  // off by default
  // The run's summary counts the calls, per image and cache context: 20 steps, the prompt only (no negative), 3
  // of them the warm-up; the goldens at these options skip some and compute some.
  const json summary = json::parse(read_file(dir.file("cached/run.json")))["summary"];
  EXPECT_EQ(summary["denoiser_calls"], 20) << summary.dump();
  EXPECT_GT(summary["denoiser_calls_cached"].get<int>(), 0) << summary.dump();
  EXPECT_LT(summary["denoiser_calls_cached"].get<int>(), 17) << summary.dump();
  EXPECT_TRUE(contains(cached.err, "DBCache: ")) << cached.err;
  EXPECT_TRUE(contains(cached.err, " denoiser calls (")) << cached.err;
  EXPECT_TRUE(contains(cached.err, "skipped the cached middle blocks")) << cached.err;

  // Resume keeps an image's options: the same run resumes, another threshold or TaylorSeer order is refused.
  RunResult again = generate("tiny-qwen-image", "cached", cached_args);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  std::vector<std::string> other = cached_args;
  other[1] = "dbcache=0.5";
  RunResult resume = generate("tiny-qwen-image", "cached", other);
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with dbcache 0.95")) << resume.err;
  other = cached_args;
  other[7] = "taylorseer_order=2";
  resume = generate("tiny-qwen-image", "cached", other);
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with taylorseer_order 1")) << resume.err;

  // One line and exit status 2 for what DBCache cannot take.
  const auto refused = [&](const std::string& model, const std::vector<std::string>& extra, const std::string& why) {
    RunResult r = generate(model, "refused", extra);
    EXPECT_EQ(r.exit_code, 2) << model << ": " << r.err;
    EXPECT_TRUE(contains(r.err, why)) << r.err;
  };
  refused("tiny-sd1", {"--set", "dbcache=0.2"}, "only of Qwen-Image, Z-Image, FLUX.1, Chroma and Stable Diffusion 3 models");
  refused("tiny-sd1", {"--set", "taylorseer_order=1"}, "only of Qwen-Image, Z-Image, FLUX.1, Chroma and Stable Diffusion 3 models");
  // tiny-sd3 has one joint block, none to cache; SD3.5's skip-layer guidance does not combine with DBCache.
  refused("tiny-sd3", {"--set", "dbcache=0.2", "--set", "dbcache_fn=1"},
          "dbcache_fn + dbcache_bn (1 + 0) must be below this transformer's 1 blocks");
  refused("tiny-sd3.5", {"--set", "dbcache=0.2", "--set", "dbcache_fn=1", "--set", "skip_guidance_layers=[1]"},
          "dbcache and skip_guidance_layers: DBCache does not combine with SD3.5's skip-layer guidance; set one of them");
  // tiny-z-image has two main layers: Fn 2 leaves none to cache.
  refused("tiny-z-image", {"--set", "dbcache=0.2", "--set", "dbcache_fn=2"}, "main layers");
  // Chroma caches its double- and single-stream lists apart; tiny-chroma has one block in each.
  refused("tiny-chroma", {"--set", "dbcache=0.2", "--set", "dbcache_fn=1"},
          "dbcache_fn + dbcache_bn (1 + 0) must be below this transformer's 1 blocks in each of its double- and "
          "single-stream lists (cached apart)");
  refused("tiny-chroma", {"--set", "dbcache=0.2", "--set", "first_block_cache=0.2"},
          "first_block_cache");
  refused("tiny-flux-dev", {"--set", "dbcache=0.2", "--set", "first_block_cache=0.2"},
          "first_block_cache and dbcache: two step caches for the same blocks; set one of them");
  refused("tiny-flux-dev", {"--set", "taylorseer_order=1"},
          "taylorseer_order is an option of DBCache, which is off (dbcache 0)");
  // tiny-flux-dev has one double- and one single-stream block; DBCache's default Fn is 8.
  refused("tiny-flux-dev", {"--set", "dbcache=0.2"},
          "dbcache_fn + dbcache_bn (8 + 0) must be below this transformer's 2 blocks");
  refused("tiny-qwen-image", {"--set", "dbcache=0.2", "--set", "dbcache_fn=1", "--set", "dbcache_bn=1"},
          "dbcache_fn + dbcache_bn (1 + 1) must be below this transformer's 2 blocks");
  refused("tiny-qwen-image", {"--set", "dbcache=0.2", "--set", "taylorseer_order=3"}, "taylorseer_order");
  refused("tiny-qwen-image", {"--set", "dbcache=-1"}, "dbcache");
  refused("tiny-qwen-image", {"--set", "dbcache=0.2", "--set", "dbcache_fn=0"}, "dbcache_fn");
}

// --offload blocks runs each block on the device in turn (nn/offload.h), the block ranges DBCache asks for
// among them: the pixels of a run without it, with the first, middle and last blocks of tiny-flux-schnell's four
// spanning its double- and single-stream ones.
TEST(DBCacheE2E, OffloadedBlocksMakeTheSamePixels) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\na lighthouse at dusk\n");
  auto generate = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model",
                                     kPipelines + "tiny-flux-schnell", "--steps", "12", "--width", "32", "--height",
                                     "32", "--batch-size", "2", "--out", dir.file(out), "--set", "dbcache=0.24",
                                     "--set", "dbcache_fn=1", "--set", "dbcache_bn=1", "--set", "dbcache_warmup=3",
                                     "--set", "taylorseer_order=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 300s);
  };
  RunResult plain = generate("plain", {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const json summary = json::parse(read_file(dir.file("plain/run.json")))["summary"];
  EXPECT_GT(summary["denoiser_calls_cached"].get<int>(), 0) << summary.dump();
  RunResult offloaded = generate("offloaded", {"--offload", "blocks"});
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  EXPECT_EQ(png_pixels_in(dir.file("offloaded")), png_pixels_in(dir.file("plain")));
  EXPECT_EQ(json::parse(read_file(dir.file("offloaded/run.json")))["summary"]["denoiser_calls_cached"],
            summary["denoiser_calls_cached"]);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

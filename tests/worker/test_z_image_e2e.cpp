// A Z-Image pipeline through the commands a user runs (dpinfer generate, launch, inspect) on the
// tiny-z-image fixture: the images are diffusers' own (tools/fixtures/make_z_image_pipelines.py
// recorded them), a JSONL line's settings and guidance reach its image, its record and its
// infotext, an image does not depend on its batch-mates or rank, and inspect reports the family
// and its components.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-z-image";
const std::string kGoldenImages = kModel + ".golden/images.safetensors";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P: the prompt of the golden cases.
const char* kPrompt = "a photograph of an astronaut riding a horse";


// dpinfer's promise: an image depends on its own prompt and seed only. Three prompts of very
// different lengths (about 110 tokens, 0 and 4), with CFG: one batch of three, three batches of
// one and three ranks give the same images, to float rounding (a batch runs other shapes).
TEST(ZImageE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  const char* kLong =
      "an extremely detailed matte painting of a sprawling futuristic city built on the back of a giant turtle "
      "swimming through a sea of clouds at golden hour, with airships, hanging gardens, waterfalls pouring off the "
      "shell, tiny people crossing rope bridges, lanterns glowing in thousands of windows, flocks of birds, "
      "volumetric light, dramatic shadows, trending on artstation, octane render, highly intricate, sharp focus, "
      "masterpiece, award winning, eight k resolution";
  write_file(dir.file("p.jsonl"), json({{"prompt", kLong}, {"negative_prompt", "blurry"}, {"seed", 5}}).dump() + "\n" +
                                      json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                                      json({{"prompt", "a red cube"}, {"negative_prompt", "ugly"}, {"seed", 7}}).dump() +
                                      "\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kModel, "--steps", "2", "--width", "32",
                                           "--height", "48"};
  expect_batch_and_rank_independence(dir, common, kEnv);
}

// Golden cases "default" (seed 0, 4 steps, the pipeline's guidance 5.0), "cfg_truncation_0_5"
// (6 steps) and "turbo_no_cfg" (8 steps, guidance 0), all 32x32.
TEST(ZImageE2E, GenerateMakesDiffusersImagesWithEachLinesSettings) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"" + std::string(kPrompt) + "\"}\n" +
                                      "{\"prompt\": \"" + kPrompt +
                                      "\", \"seed\": 0, \"steps\": 6, \"settings\": {\"cfg_truncation\": 0.5}}\n" +
                                      "{\"prompt\": \"" + kPrompt +
                                      "\", \"seed\": 0, \"steps\": 8, \"guidance_scale\": 0}\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "4",
                     "--width", "32", "--height", "32", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_png_matches_golden(dir.file("out/000000.png"), kGoldenImages, "default");
  expect_png_matches_golden(dir.file("out/000001.png"), kGoldenImages, "cfg_truncation_0_5");
  expect_png_matches_golden(dir.file("out/000002.png"), kGoldenImages, "turbo_no_cfg");

  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["guidance_scale"], 5.0);
  EXPECT_EQ(rows[0]["scheduler"], "flow_match_euler");
  EXPECT_EQ(rows[0]["settings"], json({"max_sequence_length", "cfg_normalization", "cfg_truncation", "dbcache",
                                       "dbcache_fn", "dbcache_bn", "dbcache_warmup", "dbcache_max_cached",
                                       "dbcache_max_continuous", "taylorseer_order"}));
  EXPECT_EQ(rows[0]["max_sequence_length"], 512);
  EXPECT_EQ(rows[1]["cfg_truncation"], 0.5);
  const std::string params = read_png(dir.file("out/000001.png")).texts.at("parameters");
  EXPECT_NE(params.find("CFG scale: 5, Seed: 0, Size: 32x32"), std::string::npos) << params;
  EXPECT_NE(params.find("CFG truncation: 0.5"), std::string::npos) << params;

  // A setting of another family is bad input, named with its line and Z-Image's own settings.
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"clip_skip\": 1}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kModel, "--steps", "1",
                       "--width", "32", "--height", "32", "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'" + dir.file("bad.jsonl") +
                                    "' line 1: 'clip_skip' is not a setting of Z-Image models; their settings: "
                                    "max_sequence_length, cfg_normalization, cfg_truncation"))
      << bad.err;
}

TEST(ZImageE2E, InspectReportsTheFamilyAndItsComponents) {
  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "ZImagePipeline");
  EXPECT_EQ(report["family"], "z-image");
  EXPECT_EQ(report["ok"], true);
  // 1024 x 1024 cut to the RoPE table's 32 x 32 patches (z_image_default_size)
  EXPECT_EQ(report["default_size"], json({{"width", 128}, {"height", 128}}));
  EXPECT_EQ(report["components"]["transformer"]["class"], "ZImageTransformer2DModel");
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "Qwen3Model");
  EXPECT_EQ(report["components"]["vae"]["class"], "AutoencoderKL");
  EXPECT_EQ(report["components"]["tokenizer"]["pad"]["token"], "<|endoftext|>");
  EXPECT_EQ(report["components"]["scheduler"]["dpinfer_name"], "flow_match_euler");
  EXPECT_EQ(report["settings"], json({{"max_sequence_length", 512}, {"cfg_normalization", 0.0},
                                      {"cfg_truncation", 1.0}, {"dbcache", 0.0}, {"dbcache_fn", 8},
                                      {"dbcache_bn", 0}, {"dbcache_warmup", 8}, {"dbcache_max_cached", -1},
                                      {"dbcache_max_continuous", -1}, {"taylorseer_order", 0}}));

  RunResult text = run({DPINFER_BINARY, "inspect", kModel}, kEnv, 120s);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "family: z-image\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "settings: max_sequence_length=512, cfg_normalization=0.0, cfg_truncation=1.0, "
                                 "dbcache=0.0, dbcache_fn=8, dbcache_bn=0, dbcache_warmup=8, dbcache_max_cached=-1, "
                                 "dbcache_max_continuous=-1, taylorseer_order=0 (the defaults; --set NAME=VALUE)\n"))
      << text.out;
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(ZImageE2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kModel, {"--width", "32", "--height", "32"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

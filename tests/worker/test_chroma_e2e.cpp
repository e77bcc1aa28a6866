// Chroma pipelines through the commands a user runs (dpinfer generate, launch, inspect) on the
// tiny-chroma and tiny-chroma-alt fixtures: the images are diffusers' own
// (tools/fixtures/make_chroma_pipelines.py recorded them), ChromaPipeline's defaults (35 steps, guidance
// 5 with real CFG on the empty negative prompt, max_sequence_length 512) reach the image, a JSONL line's
// steps, guidance, negative prompt and max_sequence_length reach its image, its record and its infotext,
// an image does not depend on its batch-mates or rank, and inspect reports the family and its settings.
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

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::string kChroma = kPipelines + "tiny-chroma";
const std::string kChromaAlt = kPipelines + "tiny-chroma-alt";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P, P2 and NEG: prompts and negative prompt of the golden cases.
const char* kPrompt = "a photograph of an astronaut riding a horse";
const char* kPrompt2 = "a red cube on top of a blue sphere, studio lighting";
const char* kNegative = "blurry, low quality, watermark";

/// Issue 4's bound between a PNG and the golden case `name` of fixture `model`.
void expect_golden(const std::string& png_path, const std::string& model, const std::string& name) {
  expect_png_matches_golden(png_path, kPipelines + model + ".golden/images.safetensors", name);
}


// dpinfer's promise: an image depends on its own prompt and seed only. Three prompts of very
// different lengths (so different padding masks), with and without a negative prompt: one batch of
// three, three batches of one and three ranks give the same images, to float rounding.
TEST(ChromaE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  const char* kLong =
      "an extremely detailed matte painting of a sprawling futuristic city built on the back of a giant turtle "
      "swimming through a sea of clouds at golden hour, with airships, hanging gardens, waterfalls pouring off the "
      "shell, tiny people crossing rope bridges, lanterns glowing in thousands of windows";
  write_file(dir.file("p.jsonl"),
             json({{"prompt", kLong}, {"negative_prompt", "blurry"}, {"seed", 5}}).dump() + "\n" +
                 json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                 json({{"prompt", "a red cube"}, {"negative_prompt", "ugly"}, {"seed", 7}}).dump() + "\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kChromaAlt, "--steps", "2", "--width",
                                           "64", "--height", "32", "--set", "max_sequence_length=48"};
  expect_batch_and_rank_independence(dir, common, kEnv);
}

// tiny-chroma's golden cases "default_steps_35" (seed 0: the family's 35 steps, guidance 5 with CFG on the
// empty negative prompt, max_sequence_length 512), "negative_prompt" (seed 3, 3 steps, max_sequence_length
// 32), "max_sequence_length_8" (seed 9, 2 steps, P2 cut to 8 tokens) and "guidance_1_no_cfg" (seed 4,
// 2 steps, guidance 1: no CFG), all 16x16.
TEST(ChromaE2E, GenerateMakesDiffusersImagesWithEachLinesSettings) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             json({{"prompt", kPrompt}, {"seed", 0}}).dump() + "\n" +
                 json({{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"seed", 3}, {"steps", 3},
                       {"settings", {{"max_sequence_length", 32}}}})
                     .dump() +
                 "\n" +
                 json({{"prompt", kPrompt2}, {"seed", 9}, {"steps", 2}, {"settings", {{"max_sequence_length", 8}}}})
                     .dump() +
                 "\n" +
                 json({{"prompt", kPrompt}, {"seed", 4}, {"steps", 2}, {"guidance_scale", 1.0},
                       {"settings", {{"max_sequence_length", 32}}}})
                     .dump() +
                 "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kChroma, "--width", "16",
                     "--height", "16", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_golden(dir.file("out/000000.png"), "tiny-chroma", "default_steps_35");
  expect_golden(dir.file("out/000001.png"), "tiny-chroma", "negative_prompt");
  expect_golden(dir.file("out/000002.png"), "tiny-chroma", "max_sequence_length_8");
  expect_golden(dir.file("out/000003.png"), "tiny-chroma", "guidance_1_no_cfg");

  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["steps"], 35);
  EXPECT_EQ(rows[0]["guidance_scale"], 5.0);
  EXPECT_EQ(rows[0]["scheduler"], "flow_match_euler");
  EXPECT_EQ(rows[0]["settings"], json({"max_sequence_length", "dbcache", "dbcache_fn", "dbcache_bn", "dbcache_warmup",
                                       "dbcache_max_cached", "dbcache_max_continuous", "taylorseer_order"}));
  EXPECT_EQ(rows[0]["dbcache"], 0.0);  // off by default
  EXPECT_EQ(rows[0]["max_sequence_length"], 512);
  EXPECT_EQ(rows[2]["max_sequence_length"], 8);
  EXPECT_EQ(rows[3]["guidance_scale"], 1.0);
  const std::string params = read_png(dir.file("out/000001.png")).texts.at("parameters");
  EXPECT_NE(params.find("Seed: 3, Size: 16x16"), std::string::npos) << params;
  EXPECT_NE(params.find("Max sequence length: 32"), std::string::npos) << params;

  // A setting of another family is bad input, named with its line and Chroma's own settings.
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"true_cfg_scale\": 2}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kChroma, "--steps", "1",
                       "--width", "16", "--height", "16", "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'" + dir.file("bad.jsonl") +
                                    "' line 1: 'true_cfg_scale' is not a setting of Chroma models; their settings: "
                                    "max_sequence_length"))
      << bad.err;
}

TEST(ChromaE2E, InspectReportsTheFamilyAndItsSettings) {
  RunResult inspect = run({DPINFER_BINARY, "inspect", kChroma, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "ChromaPipeline");
  EXPECT_EQ(report["family"], "chroma");
  EXPECT_EQ(report["ok"], true);
  // default_sample_size 128 times the tiny VAE's scale factor 1
  EXPECT_EQ(report["default_size"], json({{"width", 128}, {"height", 128}}));
  EXPECT_EQ(report["components"]["transformer"]["class"], "ChromaTransformer2DModel");
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "T5EncoderModel");
  EXPECT_EQ(report["components"]["tokenizer"]["class"], "T5TokenizerFast");
  EXPECT_EQ(report["components"]["vae"]["class"], "AutoencoderKL");
  EXPECT_EQ(report["components"]["scheduler"]["dpinfer_name"], "flow_match_euler");
  EXPECT_EQ(report["settings"], json({{"max_sequence_length", 512},
                                      {"dbcache", 0.0},
                                      {"dbcache_fn", 8},
                                      {"dbcache_bn", 0},
                                      {"dbcache_warmup", 8},
                                      {"dbcache_max_cached", -1},
                                      {"dbcache_max_continuous", -1},
                                      {"taylorseer_order", 0}}));

  RunResult text = run({DPINFER_BINARY, "inspect", kChromaAlt}, kEnv, 120s);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "family: chroma\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "settings: max_sequence_length=512, dbcache=0.0, dbcache_fn=8, dbcache_bn=0, "
                                 "dbcache_warmup=8, dbcache_max_cached=-1, dbcache_max_continuous=-1, "
                                 "taylorseer_order=0 (the defaults; --set NAME=VALUE)\n"))
      << text.out;
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(ChromaE2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kChroma, {"--width", "32", "--height", "16"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

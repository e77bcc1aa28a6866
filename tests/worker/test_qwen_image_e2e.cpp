// A Qwen-Image pipeline through every command a user runs (dpinfer generate, launch, inspect,
// status) on the tiny-qwen-image fixture: the worker's image is diffusers' own
// (tools/fixtures/make_qwen_image_pipelines.py recorded it), an image does not depend on its
// batch-mates (batch 1 vs 3 with prompts of very different lengths, 1 rank vs 3), and the
// family's setting reaches the records and is checked like any other.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-qwen-image";
const std::string kGoldenImages = kModel + ".golden/images.safetensors";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// make_pipelines.py's P, NEG and LONG: texts whose token embeddings the fixture made random.
const char* kPrompt = "a photograph of an astronaut riding a horse";
const char* kNegative = "blurry, low quality, watermark";
const char* kLong =
    "an extremely detailed matte painting of a sprawling futuristic city built on the back of a giant turtle swimming "
    "through a sea of clouds at golden hour, with airships, hanging gardens, waterfalls pouring off the shell, tiny "
    "people crossing rope bridges, lanterns glowing in thousands of windows, flocks of birds, volumetric light, "
    "dramatic shadows, trending on artstation, octane render, highly intricate, sharp focus, masterpiece, award "
    "winning, eight k resolution";

/// Three prompts of very different token lengths (the long one about 110 tokens, the short
/// one 4), with and without negative prompts, so that a batch of them is padded.
std::string three_prompts() {
  return json({{"prompt", kLong}, {"negative_prompt", kNegative}, {"seed", 5}}).dump() + "\n" +
         json({{"prompt", "a red cube"}, {"negative_prompt", " "}, {"seed", 6}}).dump() + "\n" +
         json({{"prompt", kPrompt}, {"negative_prompt", "blurry"}, {"seed", 7}}).dump() + "\n";
}


// diffusers' "true_cfg" case: seed 1, 3 steps, true_cfg_scale 4 with a negative prompt, 32x32.
TEST(QwenImageE2E, TheWorkersImageIsDiffusersOwn) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), json({{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"seed", 1}}).dump() + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "3",
                     "--width", "32", "--height", "32", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedPng png = read_png(dir.file("out/000000.png"));
  expect_pixels_match_golden(png.pixels, kGoldenImages, "true_cfg");
  const json rec = json::parse(png.texts.at("dpinfer"));
  EXPECT_EQ(rec["guidance_scale"], 4.0);  // the family's default: true_cfg_scale 4
  EXPECT_EQ(rec["scheduler"], "flow_match_euler");
  EXPECT_EQ(rec["max_sequence_length"], 512);
}

// dpinfer's promise beyond diffusers: an image depends on its own prompt and seed only. One
// batch of three prompts of very different lengths, three batches of one, and three ranks
// give the same images (to float rounding: the padded batch runs other matrix shapes).
TEST(QwenImageE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), three_prompts());
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kModel, "--steps", "2", "--width", "32",
                                           "--height", "48"};
  expect_batch_and_rank_independence(dir, common, kEnv);
}

TEST(QwenImageE2E, InspectReportsTheFamilyAndASettingIsCheckedAgainstIt) {
  TempDir dir;
  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "QwenImagePipeline");
  EXPECT_EQ(report["family"], "qwen-image");
  // default_sample_size 128 times the tiny VAE's scale factor 4
  EXPECT_EQ(report["default_size"], json({{"width", 512}, {"height", 512}}));
  for (const char* c : {"transformer", "text_encoder", "tokenizer", "vae", "scheduler"})
    EXPECT_TRUE(report["components"].contains(c)) << c;
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "Qwen2_5_VLForConditionalGeneration");

  // diffusers refuses max_sequence_length > 1024; so does the family's setting, naming the line.
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"max_sequence_length\": 2000}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kModel, "--steps", "1",
                       "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'" + dir.file("bad.jsonl") + "' line 1")) << bad.err;
  EXPECT_TRUE(contains(bad.err, "max_sequence_length")) << bad.err;

  // A line with its own max_sequence_length: the record carries it.
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red cube\", \"settings\": {\"max_sequence_length\": 3}}\n");
  RunResult ok = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "1",
                      "--width", "32", "--height", "32", "--out", dir.file("out")},
                     kEnv, 300s);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const json rec = json::parse(read_png(dir.file("out/000000.png")).texts.at("dpinfer"));
  EXPECT_EQ(rec["max_sequence_length"], 3);
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(QwenImageE2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kModel, {"--width", "32", "--height", "32"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// A Stable Diffusion 3.5-like pipeline through every command a user runs (dpinfer generate,
// launch, inspect, status) on the tiny-sd3.5 fixture (qk_norm, dual attention, no T5): the
// worker's image is diffusers' own (tools/fixtures/make_sd3_pipelines.py recorded it), an image
// does not depend on its batch-mates (batch 1 vs 3, 1 rank vs 3), the family's settings reach the
// records and are checked like any other, and a model with a T5 encoder, which this build does not
// run yet, is refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dpinfer/io/safetensors.h"
#include "support/image_compare.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd3.5";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// make_pipelines.py's P and NEG.
const char* kPrompt = "a photograph of an astronaut riding a horse";
const char* kNegative = "blurry, low quality, watermark";

}  // namespace

// diffusers' "default_cfg" case: seed 0, 3 steps, guidance 7 (the family's default) with the default
// empty negative prompt, the default size (sample_size 8 x the tiny VAE's 4 = 32).
TEST(SD3E2E, TheWorkersImageIsDiffusersOwn) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), json({{"prompt", kPrompt}, {"seed", 0}}).dump() + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "3", "--out",
                     dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedPng png = read_png(dir.file("out/000000.png"));
  auto golden = dpinfer::io::SafetensorsFile::open(std::string(DPINFER_TEST_DATA_DIR) +
                                                   "/pipelines/tiny-sd3.5.golden/images.safetensors");
  const dpinfer::io::TensorView* want = golden->find("default_cfg");
  ASSERT_NE(want, nullptr);
  ASSERT_EQ(want->nbytes, png.pixels.size());
  expect_within_rounding(png.pixels.data(), reinterpret_cast<const uint8_t*>(want->data), want->nbytes, "default_cfg");
  const json rec = json::parse(png.texts.at("dpinfer"));
  EXPECT_EQ(rec["guidance_scale"], 7.0);
  EXPECT_EQ(rec["scheduler"], "flow_match_euler");
  EXPECT_EQ(rec["max_sequence_length"], 256);
  EXPECT_EQ(rec["clip_skip"], 0);
}

// One batch of three, three batches of one, and three ranks give the same images (to float
// rounding for the batch, which runs other matrix shapes).
TEST(SD3E2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             json({{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"seed", 5}}).dump() + "\n" +
                 json({{"prompt", "a red cube"}, {"seed", 6}}).dump() + "\n" +
                 json({{"prompt", ""}, {"negative_prompt", "blurry"}, {"seed", 7}}).dump() + "\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kModel, "--steps", "2", "--width", "64",
                                           "--height", "32"};
  auto generate = [&](const std::string& out, const std::string& batch) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", "--out", dir.file(out), "--batch-size", batch};
    argv.insert(argv.end(), common.begin(), common.end());
    RunResult r = run(argv, kEnv, 300s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  };
  generate("alone", "1");
  generate("batched", "3");
  std::vector<std::string> launch = {DPINFER_BINARY, "launch", "--nproc-per-node", "3"};
  launch.insert(launch.end(), common.begin(), common.end());
  launch.insert(launch.end(), {"--out", dir.file("ranks"), "--batch-size", "3"});
  RunResult ranks = run(launch, kEnv, 300s);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;

  const auto alone = png_pixels_in(dir.file("alone"));
  const auto batched = png_pixels_in(dir.file("batched"));
  const auto ranked = png_pixels_in(dir.file("ranks"));
  ASSERT_EQ(alone.size(), 3u);
  ASSERT_EQ(batched.size(), 3u);
  ASSERT_EQ(ranked.size(), 3u);
  for (const auto& [name, pixels] : alone) {
    expect_within_rounding(batched.at(name), pixels, "batch of 3: " + name);
    EXPECT_EQ(ranked.at(name), pixels) << "3 ranks (each a batch of one): " + name;
  }
  RunResult status = run({DPINFER_BINARY, "status", dir.file("ranks"), "--prompts", dir.file("p.jsonl")}, kEnv, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
}

TEST(SD3E2E, InspectReportsTheFamilyAndSettingsAreCheckedAgainstIt) {
  TempDir dir;
  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "StableDiffusion3Pipeline");
  EXPECT_EQ(report["family"], "stable-diffusion-3");
  EXPECT_EQ(report["default_size"], json({{"width", 32}, {"height", 32}}));
  for (const char* c :
       {"transformer", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae", "scheduler"})
    EXPECT_TRUE(report["components"].contains(c)) << c;
  EXPECT_EQ(report["components"]["transformer"]["class"], "SD3Transformer2DModel");

  // diffusers refuses max_sequence_length > 512; so does the family's setting, naming the line.
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"max_sequence_length\": 600}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kModel, "--steps", "1",
                       "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'" + dir.file("bad.jsonl") + "' line 1")) << bad.err;
  EXPECT_TRUE(contains(bad.err, "max_sequence_length")) << bad.err;

  // A line with its own settings: the record carries them.
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\", \"settings\": {\"max_sequence_length\": 3, \"clip_skip\": 1}}\n");
  RunResult ok = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "1",
                      "--out", dir.file("out")},
                     kEnv, 300s);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const json rec = json::parse(read_png(dir.file("out/000000.png")).texts.at("dpinfer"));
  EXPECT_EQ(rec["max_sequence_length"], 3);
  EXPECT_EQ(rec["clip_skip"], 1);
}

// The same folder with a T5 entry in model_index.json: refused in one line (exit 2) rather than run
// without it, until the T5 encoder lands.
TEST(SD3E2E, AModelWithT5IsRefusedInOneLine) {
  TempDir dir;
  const std::string copy = dir.file("with-t5");
  fs::copy(kModel, copy, fs::copy_options::recursive);
  json index = json::parse(std::ifstream(copy + "/model_index.json"));
  index["text_encoder_3"] = json::array({"transformers", "T5EncoderModel"});
  index["tokenizer_3"] = json::array({"transformers", "T5TokenizerFast"});
  write_file(copy + "/model_index.json", index.dump(2));
  // Folders as a real SD3 download has them (contents beside the point: the family refuses first).
  fs::create_directories(copy + "/text_encoder_3");
  fs::create_directories(copy + "/tokenizer_3");
  write_file(copy + "/text_encoder_3/config.json", "{\"d_model\": 4096}");
  write_file(copy + "/text_encoder_3/model.safetensors", "x");
  write_file(copy + "/tokenizer_3/tokenizer_config.json", "{}");
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"x\"}\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", copy, "--steps", "1", "--out",
                     dir.file("out")},
                    kEnv, 300s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "text_encoder_3")) << r.err;
  EXPECT_TRUE(contains(r.err, "does not run yet")) << r.err;
}

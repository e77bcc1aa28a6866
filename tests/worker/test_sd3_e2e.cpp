// A Stable Diffusion 3.5-like pipeline through every command a user runs (dpinfer generate,
// launch, inspect, status) on the tiny-sd3.5 fixture (qk_norm, dual attention, no T5) and the
// tiny-sd3.5-t5 one (with its T5 text encoder, as real SD3 / SD3.5 folders ship): the worker's
// image is diffusers' own (tools/fixtures/make_sd3_pipelines.py recorded it), an image does not
// depend on its batch-mates (batch 1 vs 3, 1 rank vs 3), the family's settings reach the records
// and are checked like any other, and T5 components that do not fit are refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
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

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd3.5";
const std::string kGoldenImages = kModel + ".golden/images.safetensors";
const std::string kModelT5 = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd3.5-t5";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// make_pipelines.py's P and NEG.
const char* kPrompt = "a photograph of an astronaut riding a horse";
const char* kNegative = "blurry, low quality, watermark";

/// Generates three prompts (with and without negatives) with `model` as one batch of 3, three
/// batches of 1 and 3 ranks, and expects the same images (to float rounding for the batch, which
/// runs other matrix shapes; exactly across ranks, each a batch of one).
void expect_batch_and_rank_independence(const std::string& model) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             json({{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"seed", 5}}).dump() + "\n" +
                 json({{"prompt", "a red cube"}, {"seed", 6}}).dump() + "\n" +
                 json({{"prompt", ""}, {"negative_prompt", "blurry"}, {"seed", 7}}).dump() + "\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", model, "--steps", "2", "--width", "64",
                                           "--height", "32"};
  dpinfer::test::expect_batch_and_rank_independence(dir, common, kEnv);
}

/// A copy of tiny-sd3.5-t5 under `dir`, for tests that break one of its files.
std::string copy_of_t5_model(const TempDir& dir) {
  const std::string copy = dir.file("with-t5");
  fs::copy(kModelT5, copy, fs::copy_options::recursive);
  return copy;
}

/// `dpinfer generate` of one prompt with `model`: expects exit 2 and one line naming `what`.
void expect_refused_in_one_line(const TempDir& dir, const std::string& model, const std::vector<std::string>& what) {
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"x\"}\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", model, "--steps", "1", "--out",
                     dir.file("out")},
                    kEnv, 300s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const std::string& w : what) EXPECT_TRUE(contains(r.err, w)) << r.err;
  EXPECT_FALSE(contains(r.err, "Exception raised from")) << r.err;  // no LibTorch backtrace
}


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
  expect_pixels_match_golden(png.pixels, kGoldenImages, "default_cfg");
  const json rec = json::parse(png.texts.at("dpinfer"));
  EXPECT_EQ(rec["guidance_scale"], 7.0);
  EXPECT_EQ(rec["scheduler"], "flow_match_euler");
  EXPECT_EQ(rec["max_sequence_length"], 256);
  EXPECT_EQ(rec["clip_skip"], 0);
}

// SD3.5's skip-layer guidance through `dpinfer launch` (2 ranks) with list-valued --set: diffusers'
// "slg_wide_window" case (blocks [0, 2], scale 1.5, start 0, stop 1, 4 steps, seed 41, with NEG); the
// record and the infotext carry the settings; a block the transformer lacks is refused in one line.
TEST(SD3E2E, SkipLayerGuidanceThroughLaunchIsDiffusersOwn) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), json({{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"seed", 41}}).dump() +
                                      "\n" + json({{"prompt", "a red cube"}, {"seed", 42}}).dump() + "\n");
  RunResult r = run({DPINFER_BINARY, "launch", "--nproc-per-node", "2", dir.file("p.jsonl"), "--model", kModel,
                     "--steps", "4", "--set", "skip_guidance_layers=[0,2]", "--set", "skip_layer_guidance_scale=1.5",
                     "--set", "skip_layer_guidance_start=0", "--set", "skip_layer_guidance_stop=1", "--out",
                     dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedPng png = read_png(dir.file("out/000000.png"));
  expect_pixels_match_golden(png.pixels, kGoldenImages, "slg_wide_window");
  const json rec = json::parse(png.texts.at("dpinfer"));
  EXPECT_EQ(rec["skip_guidance_layers"], json::array({0, 2}));
  EXPECT_EQ(rec["skip_layer_guidance_scale"], 1.5);
  EXPECT_TRUE(contains(png.texts.at("parameters"), "SLG layers: \"0,2\", SLG scale: 1.5")) << png.texts.at("parameters");

  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"skip_guidance_layers\": [3]}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kModel, "--steps", "1",
                       "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "skip_guidance_layers: 3 is not a block of the transformer, which has 3")) << bad.err;
  RunResult wrong = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "1",
                         "--set", "skip_guidance_layers=7", "--out", dir.file("wrong")},
                        kEnv, 300s);
  EXPECT_EQ(wrong.exit_code, 2) << wrong.err;
  EXPECT_TRUE(contains(wrong.err, "must be a list of at most 1000 integers")) << wrong.err;
}

// One batch of three, three batches of one, and three ranks give the same images, without T5 and with it.
TEST(SD3E2E, AnImageDoesNotDependOnItsBatchOrRank) { expect_batch_and_rank_independence(kModel); }

TEST(SD3E2E, WithT5AnImageDoesNotDependOnItsBatchOrRank) { expect_batch_and_rank_independence(kModelT5); }

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

// A model with T5 through dpinfer generate: two of diffusers' cases, recorded by make_sd3_pipelines.py, one at
// the defaults (max_sequence_length 256, CFG 7 with the empty negative prompt) and one whose long prompt T5 cuts at
// max_sequence_length 16, with a negative prompt; the records carry the setting and the truncation is warned of.
// inspect lists the T5 components.
TEST(SD3E2E, AModelWithT5RunsThroughGenerate) {
  TempDir dir;
  const json doc = json::parse(std::ifstream(std::string(DPINFER_TEST_DATA_DIR) +
                                             "/pipelines/tiny-sd3.5-t5.golden/cases.json"));
  const std::string golden = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd3.5-t5.golden/images.safetensors";
  std::map<std::string, json> cases;
  for (const json& c : doc["cases"]) cases[c["name"].get<std::string>()] = c;
  for (const char* name : {"default_cfg", "long_prompt_max_sequence_length_16"}) {
    SCOPED_TRACE(name);
    const json& c = cases.at(name);
    const json& call = c["call"];
    json line = {{"prompt", call["prompt"]}, {"seed", c["generator"]["seeds"][0]}};
    if (!call["negative_prompt"].is_null()) line["negative_prompt"] = call["negative_prompt"];
    line["settings"] = {{"max_sequence_length", call["max_sequence_length"]}};
    const std::string out = dir.file(std::string("out-") + name);
    write_file(dir.file(std::string(name) + ".jsonl"), line.dump() + "\n");
    RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file(std::string(name) + ".jsonl"), "--model", kModelT5,
                       "--steps", std::to_string(call["num_inference_steps"].get<int>()), "--out", out},
                      kEnv, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    DecodedPng png = read_png(out + "/000000.png");
    expect_pixels_match_golden(png.pixels, golden, name);
    const json rec = json::parse(png.texts.at("dpinfer"));
    EXPECT_EQ(rec["guidance_scale"], 7.0);
    EXPECT_EQ(rec["max_sequence_length"], call["max_sequence_length"]);
    EXPECT_EQ(contains(r.err, "too long for T5"), call["max_sequence_length"] == 16) << r.err;
  }

  RunResult inspect = run({DPINFER_BINARY, "inspect", kModelT5, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["family"], "stable-diffusion-3");
  EXPECT_EQ(report["components"]["text_encoder_3"]["class"], "T5EncoderModel");
  EXPECT_EQ(report["components"]["tokenizer_3"]["class"], "T5TokenizerFast");
}

// T5 components that do not fit the rest are refused in one line (exit 2), naming what is wrong.
TEST(SD3E2E, T5ComponentsThatDoNotFitAreRefusedInOneLine) {
  {  // T5's width is not the transformer's joint_attention_dim
    TempDir dir;
    const std::string copy = copy_of_t5_model(dir);
    json config = json::parse(std::ifstream(copy + "/text_encoder_3/config.json"));
    config["d_model"] = 64;
    write_file(copy + "/text_encoder_3/config.json", config.dump(2));
    expect_refused_in_one_line(dir, copy, {"joint_attention_dim 40", "d_model 64"});
  }
  {  // the tokenizer gives ids past the encoder's embedding
    TempDir dir;
    const std::string copy = copy_of_t5_model(dir);
    json config = json::parse(std::ifstream(copy + "/text_encoder_3/config.json"));
    config["vocab_size"] = 500;
    write_file(copy + "/text_encoder_3/config.json", config.dump(2));
    expect_refused_in_one_line(dir, copy, {"tokenizer_3", "vocab_size 500"});
  }
  {  // text_encoder_3 without tokenizer_3
    TempDir dir;
    const std::string copy = copy_of_t5_model(dir);
    json index = json::parse(std::ifstream(copy + "/model_index.json"));
    index["tokenizer_3"] = json::array({nullptr, nullptr});
    write_file(copy + "/model_index.json", index.dump(2));
    expect_refused_in_one_line(dir, copy, {"text_encoder_3", "tokenizer_3"});
  }
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(SD3E2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kModelT5, {"--width", "32", "--height", "32"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

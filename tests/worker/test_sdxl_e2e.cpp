// An SDXL pipeline through every command a user runs (dpinfer launch, generate, inspect,
// status, merge) on the tiny-sdxl fixture: the worker's first image is diffusers' own
// (tools/fixtures/make_sdxl_pipelines.py recorded it), two ranks make the same images as
// one, and a JSONL line's settings reach its images' records and infotext.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/image_compare.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sdxl";
const std::string kGoldenImages = kModel + ".golden/images.safetensors";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P: the prompt of the golden "default" case.
const char* kPrompt = "a photograph of an astronaut riding a horse";


// diffusers' "default" case: seed 0, 6 steps, the pipeline's own scheduler (Euler, SDXL-base's
// config), its default guidance (5.0) and size (64x64). dpinfer's defaults for an SDXL model are
// diffusers', so only the steps are given.
TEST(SdxlE2E, TheWorkersImageIsDiffusersOwn) {
  TempDir dir;
  write_file(dir.file("p.txt"), std::string(kPrompt) + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kModel, "--steps", "6", "--out",
                     dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedPng png = read_png(dir.file("out/000000.png"));
  ASSERT_EQ(png.width, 64);
  ASSERT_EQ(png.height, 64);
  expect_pixels_match_golden(png.pixels, kGoldenImages, "default");
  const json rec = json::parse(png.texts.at("dpinfer"));
  EXPECT_EQ(rec["guidance_scale"], 5.0);
  EXPECT_EQ(rec["scheduler"], "euler");
  EXPECT_NE(png.texts.at("parameters").find("Sampler: Euler, CFG scale: 5, Seed: 0, Size: 64x64"), std::string::npos)
      << png.texts.at("parameters");
}

TEST(SdxlE2E, LaunchStatusMergeAndInspectWorkAsForSd) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\", \"num_images\": 2}\n"
             "{\"prompt\": \"a blue sphere\", \"negative_prompt\": \"blurry\", \"settings\": {\"clip_skip\": 1}}\n"
             "{\"prompt\": \"a green cone\", \"settings\": {\"guidance_rescale\": 0.7}}\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kModel, "--steps", "3", "--width", "32",
                                           "--height", "48"};
  std::vector<std::string> solo = {DPINFER_WORKER_BINARY, "generate", "--out", dir.file("one")};
  solo.insert(solo.end(), common.begin(), common.end());
  RunResult one = run(solo, kEnv, 300s);
  ASSERT_EQ(one.exit_code, 0) << one.err;

  std::vector<std::string> launch = {DPINFER_BINARY, "launch", "--nproc-per-node", "2"};
  launch.insert(launch.end(), common.begin(), common.end());
  launch.insert(launch.end(), {"--out", dir.file("two")});
  RunResult two = run(launch, kEnv, 300s);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(png_pixels_in(dir.file("two")), png_pixels_in(dir.file("one")));

  // Each line's settings are in its images' records, the run's defaults elsewhere.
  const std::vector<json> rows = read_jsonl(dir.file("two/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["clip_skip"], 0);
  EXPECT_EQ(rows[2]["clip_skip"], 1);
  EXPECT_EQ(rows[3]["guidance_rescale"], 0.7);
  EXPECT_EQ(rows[2]["settings"],
            json({"clip_skip", "guidance_rescale", "eta", "deep_cache_interval", "deep_cache_branch"}));
  EXPECT_NE(read_png(dir.file("two/000002.png")).texts.at("parameters").find("Clip skip: 2"), std::string::npos);

  RunResult status = run({DPINFER_BINARY, "status", dir.file("two"), "--prompts", dir.file("p.jsonl")}, kEnv, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
  RunResult merge = run({DPINFER_BINARY, "merge", dir.file("two")}, kEnv, 60s);
  EXPECT_EQ(merge.exit_code, 0) << merge.out << merge.err;

  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "StableDiffusionXLPipeline");
  EXPECT_EQ(report["family"], "stable-diffusion-xl");
  EXPECT_EQ(report["default_size"], json({{"width", 64}, {"height", 64}}));
  for (const char* c : {"text_encoder", "text_encoder_2", "unet", "vae", "tokenizer", "tokenizer_2", "scheduler"})
    EXPECT_TRUE(report["components"].contains(c)) << c;
  EXPECT_EQ(report["components"]["text_encoder_2"]["class"], "CLIPTextModelWithProjection");
  EXPECT_EQ(report["components"]["tokenizer_2"]["pad"]["token"], "!");

  // A setting the family does not have is bad input, named with its line.
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"true_cfg_scale\": 4}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kModel, "--steps", "1",
                       "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'" + dir.file("bad.jsonl") +
                                    "' line 1: 'true_cfg_scale' is not a setting of Stable Diffusion XL models; their "
                                    "settings: clip_skip, guidance_rescale, eta, deep_cache_interval, "
                                    "deep_cache_branch"))
      << bad.err;
}

// Issue 14's LoRA run: one process, a JSONL file whose lines give different LoRA sets (two at
// once with scales, one, none, one again), batched together where they may be. Each image is
// diffusers' own with those LoRAs fused (tools/fixtures/make_lora_fixtures.py), the pipeline
// loads once, and the records and infotext name each LoRA, its scale and AUTOMATIC1111's hash.
// A second run resumes; a changed LoRA scale is not "already made".
TEST(SdxlE2E, TwoLorasPerJsonlLineInOneProcessAreDiffusersOwn) {
  TempDir dir;
  const std::string loras = std::string(DPINFER_TEST_DATA_DIR) + "/loras/";
  const auto line = [&](const std::string& loras_json) {
    return std::string("{\"prompt\": \"") + kPrompt + "\", \"seed\": 7" +
           (loras_json.empty() ? "" : ", \"loras\": " + loras_json) + "}\n";
  };
  const std::string two = "[{\"path\": \"" + loras + "sdxl-kohya.safetensors\", \"scale\": 0.5}, {\"path\": \"" + loras +
                          "sdxl-peft.safetensors\", \"scale\": -0.4}]";
  write_file(dir.file("p.jsonl"), line(two) + line("[\"" + loras + "sdxl-peft.safetensors:0.7\"]") + line("") +
                                      line("[\"" + loras + "sdxl-kohya.safetensors\"]"));
  const std::vector<std::string> args = {DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel,
                                         "--steps", "3", "--guidance-scale", "5", "--batch-size", "4",
                                         "--out", dir.file("out"), "-v"};
  RunResult r = run(args, kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(occurrences(r.err, "pipeline loaded"), 1u) << r.err;

  const json hashes = json::parse(std::ifstream(loras + "hashes.json"));
  const std::string kohya = hashes["sdxl-kohya.safetensors"]["a1111_lora_sha256"].get<std::string>().substr(0, 12);
  const std::string peft = hashes["sdxl-peft.safetensors"]["a1111_lora_sha256"].get<std::string>().substr(0, 12);
  const std::string golden = loras + "tiny-sdxl-lora.golden/images.safetensors";
  const std::vector<std::string> cases = {"kohya_and_peft", "peft_scaled", "", "kohya"};
  std::vector<uint8_t> plain;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    DecodedPng png = read_png(dir.file("out/00000" + std::to_string(i) + ".png"));
    if (!cases[i].empty()) {
      expect_pixels_match_golden(png.pixels, golden, cases[i]);
    } else {
      plain = png.pixels;
    }
    const json rec = json::parse(png.texts.at("dpinfer"));
    const std::string params = png.texts.at("parameters");
    EXPECT_EQ(rec["model_hash"], "a61dccc133") << "sha256sum tiny-sdxl/unet/diffusion_pytorch_model.safetensors";
    EXPECT_NE(params.find(", Model hash: a61dccc133, Model: "), std::string::npos) << params;
    if (i == 0) {
      EXPECT_EQ(params.substr(0, params.find('\n')),
                std::string(kPrompt) + " <lora:sdxl-kohya:0.5> <lora:sdxl-peft:-0.4>");
      EXPECT_NE(params.find(", Lora hashes: \"sdxl-kohya: " + kohya + ", sdxl-peft: " + peft + "\""), std::string::npos)
          << params;
      EXPECT_EQ(rec["loras"], json::parse("[{\"name\": \"sdxl-kohya\", \"scale\": 0.5, \"hash\": \"" + kohya +
                                          "\"}, {\"name\": \"sdxl-peft\", \"scale\": -0.4, \"hash\": \"" + peft + "\"}]"));
      EXPECT_EQ(rec["lora_paths"][0], loras + "sdxl-kohya.safetensors");
    } else if (i == 2) {
      EXPECT_EQ(rec["loras"], json::array());
      EXPECT_EQ(params.find("Lora hashes"), std::string::npos) << params;
      EXPECT_EQ(params.find("<lora:"), std::string::npos) << params;
    } else if (i == 3) {
      EXPECT_NE(params.find(", Lora hashes: \"sdxl-kohya: " + kohya + "\""), std::string::npos) << params;
    }
  }
  // The image without LoRA is the model's own: the LoRAs merged before it were taken out.
  write_file(dir.file("plain.txt"), std::string(kPrompt) + "\n");
  RunResult p = run({DPINFER_WORKER_BINARY, "generate", dir.file("plain.txt"), "--model", kModel, "--steps", "3",
           "--guidance-scale", "5", "--seed", "7", "--out", dir.file("plain")},
          kEnv, 300s);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(read_png(dir.file("plain/000000.png")).pixels, plain);

  // Resumed: nothing to make, the hashes from out/hashes.json.
  RunResult again = run(args, kEnv, 300s);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("skipped 4 item(s)"), std::string::npos) << again.err;
  ASSERT_TRUE(fs::exists(dir.file("out/hashes.json")));

  // Another scale for line 2's LoRA: its item was made with another LoRA set.
  std::string changed = read_file(dir.file("p.jsonl"));
  changed.replace(changed.find("sdxl-peft.safetensors:0.7"), 25, "sdxl-peft.safetensors:0.9");
  write_file(dir.file("p.jsonl"), changed);
  RunResult refused = run(args, kEnv, 300s);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("made with loras"), std::string::npos) << refused.err;
}

TEST(SdxlE2E, ALoraForAnotherFamilyIsRefusedInOneLineBeforeAnyImage) {
  TempDir dir;
  write_file(dir.file("p.txt"), std::string(kPrompt) + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kModel, "--steps", "1", "--lora",
                     std::string(DPINFER_TEST_DATA_DIR) + "/loras/other-family.safetensors:0.5", "--out",
                     dir.file("out")},
                    kEnv, 300s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("other-family.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("transformer (DiT) model"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out/000000.png")));
  RunResult missing = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kModel, "--steps", "1",
                           "--lora", dir.file("nope.safetensors"), "--out", dir.file("out")},
                          kEnv, 300s);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("nope.safetensors' is not a file"), std::string::npos) << missing.err;
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(SdxlE2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kModel, {"--width", "32", "--height", "32"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// An SDXL pipeline through every command a user runs (dpinfer launch, generate, inspect,
// status, merge) on the tiny-sdxl fixture: the worker's first image is diffusers' own
// (tools/fixtures/make_sdxl_pipelines.py recorded it), two ranks make the same images as
// one, and a JSONL line's settings reach its images' records and infotext.
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

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sdxl";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P: the prompt of the golden "default" case.
const char* kPrompt = "a photograph of an astronaut riding a horse";

}  // namespace

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
  auto golden = dpinfer::io::SafetensorsFile::open(std::string(DPINFER_TEST_DATA_DIR) +
                                                   "/pipelines/tiny-sdxl.golden/images.safetensors");
  const dpinfer::io::TensorView* want = golden->find("default");
  ASSERT_NE(want, nullptr);
  ASSERT_EQ(want->nbytes, png.pixels.size());
  expect_within_rounding(png.pixels.data(), reinterpret_cast<const uint8_t*>(want->data), want->nbytes, "default");
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
  EXPECT_EQ(rows[2]["settings"], json({"clip_skip", "guidance_rescale", "eta"}));
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
                                    "settings: clip_skip, guidance_rescale, eta"))
      << bad.err;
}

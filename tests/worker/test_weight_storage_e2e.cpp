// --weight-storage end to end (issue 26): a run that stores tiny-flux-dev's weights in float8 makes
// diffusers' layerwise-casting image (make_fp8_storage_pipelines.py's golden; the bit-for-bit check is
// PipelineParity's), says so in every record, infotext and run.json, and resume refuses to mix its
// images with those of another storage. LoRAs run on the stored weights, unfused (make_lora_storage_fixtures.py's
// golden), and are recorded with the storage; unknown values are refused in one line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "dpinfer/io/safetensors.h"
#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::string kDev = kPipelines + "tiny-flux-dev";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// make_pipelines.py's P with seed 0 at the family's defaults (28 steps, guidance 3.5), 16x16: the golden
// case default_steps_28.
RunResult generate(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kDev, "--dtype",
                                   "bf16", "--width", "16", "--height", "16", "--out", out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv, kEnv, 300s);
}


TEST(WeightStorageE2E, Fp8MakesTheLayerwiseCastingImageAndSaysSo) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a photograph of an astronaut riding a horse\n");
  RunResult plain = generate(dir, dir.file("plain"), {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  RunResult fp8 = generate(dir, dir.file("fp8"), {"--weight-storage", "fp8"});
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;

  const DecodedPng stored = read_png(dir.file("fp8/000000.png"));
  const DecodedPng full = read_png(dir.file("plain/000000.png"));
  EXPECT_NE(stored.pixels, full.pixels);
  // The golden's own machine gives it bit for bit (PipelineParity); any CPU stays within the cross-CPU
  // bound of a bf16 image (mean |d| <= 2), while the bf16 image is about 5 away from it.
  const std::string fp8_images = kPipelines + "tiny-flux-dev.golden/fp8/images.safetensors";
  EXPECT_LE(mean_distance_from_golden(stored.pixels, fp8_images, "fp8_default_steps_28"), 2.0);
  EXPECT_GT(mean_distance_from_golden(full.pixels, fp8_images, "fp8_default_steps_28"), 2.0);

  EXPECT_TRUE(contains(stored.texts.at("parameters"), ", Weight storage: fp8")) << stored.texts.at("parameters");
  EXPECT_FALSE(contains(full.texts.at("parameters"), "Weight storage")) << full.texts.at("parameters");
  EXPECT_EQ(read_jsonl(dir.file("fp8/metadata.jsonl")).at(0)["weight_storage"], "fp8");
  EXPECT_FALSE(read_jsonl(dir.file("plain/metadata.jsonl")).at(0).contains("weight_storage"));
  const nlohmann::json run_json = nlohmann::json::parse(read_file(dir.file("fp8/run.json")));
  EXPECT_EQ(run_json["options"]["weight_storage"], "fp8");
  EXPECT_EQ(run_json["pipeline"]["weight_storage"], "fp8");

  // Resume compares the storage, both ways; the same storage resumes.
  RunResult mixed = generate(dir, dir.file("plain"), {"--weight-storage", "fp8"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with weight_storage \"default\"")) << mixed.err;
  mixed = generate(dir, dir.file("fp8"), {"--weight-storage", "fp8-denoiser"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with weight_storage \"fp8\"")) << mixed.err;
  EXPECT_EQ(generate(dir, dir.file("fp8"), {"--weight-storage", "fp8"}).exit_code, 0);

  // Two-phase chunks load the components again when they come back: in float8 again, the same image.
  RunResult chunked = generate(dir, dir.file("chunked"), {"--weight-storage", "fp8", "--encode-chunk", "4"});
  ASSERT_EQ(chunked.exit_code, 0) << chunked.err;
  EXPECT_EQ(read_png(dir.file("chunked/000000.png")).pixels, stored.pixels);

  // fp8-denoiser leaves the text encoders in bf16: another image again.
  RunResult denoiser = generate(dir, dir.file("denoiser"), {"--weight-storage", "fp8-denoiser"});
  ASSERT_EQ(denoiser.exit_code, 0) << denoiser.err;
  EXPECT_LE(mean_distance_from_golden(read_png(dir.file("denoiser/000000.png")).pixels, fp8_images,
                          "fp8_denoiser_default_steps_28"),
            2.0);
}

// The run dtype changes pixels as the storage does: resume refuses to add fp32 images to a bf16 run's directory.
TEST(WeightStorageE2E, ResumeComparesTheRunDtypeToo) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  auto with_dtype = [&](const std::string& dtype) {
    return run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kDev, "--dtype", dtype, "--steps", "2",
                "--width", "16", "--height", "16", "--out", dir.file("out")},
               kEnv, 300s);
  };
  ASSERT_EQ(with_dtype("bf16").exit_code, 0);
  EXPECT_EQ(read_jsonl(dir.file("out/metadata.jsonl")).at(0)["dtype"], "bf16");
  RunResult mixed = with_dtype("fp32");
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with dtype \"bf16\"")) << mixed.err;
  EXPECT_EQ(with_dtype("bf16").exit_code, 0);
}

TEST(WeightStorageE2E, LorasRunUnfusedOnStoredWeightsAndAreRecorded) {
  // make_lora_storage_fixtures.py's fp8_peft: flux-peft on the float8-stored transformer and CLIPs, PEFT's unfused
  // LoRA layers (the bit-for-bit check is PipelineParity's).
  TempDir dir;
  write_file(dir.file("p.txt"), "a photograph of an astronaut riding a horse\n");
  const std::string lora = std::string(DPINFER_TEST_DATA_DIR) + "/loras-dit/flux-peft.safetensors";
  RunResult run1 = generate(dir, dir.file("out"), {"--weight-storage", "fp8", "--lora", lora});
  ASSERT_EQ(run1.exit_code, 0) << run1.err;
  const DecodedPng image = read_png(dir.file("out/000000.png"));
  const std::string golden = kPipelines + "tiny-flux-dev.golden/lora-storage/images.safetensors";
  EXPECT_LE(mean_distance_from_golden(image.pixels, golden, "fp8_peft"), 2.0);
  const nlohmann::json record = read_jsonl(dir.file("out/metadata.jsonl")).at(0);
  EXPECT_EQ(record["weight_storage"], "fp8");
  ASSERT_EQ(record["loras"].size(), 1u) << record.dump();
  EXPECT_EQ(record["loras"][0]["name"], "flux-peft") << record.dump();
  EXPECT_EQ(record["lora_paths"][0], lora) << record.dump();
  // Resume takes the same storage and LoRA set, and refuses the LoRA's images under the full-precision weights.
  EXPECT_EQ(generate(dir, dir.file("out"), {"--weight-storage", "fp8", "--lora", lora}).exit_code, 0);
  RunResult mixed = generate(dir, dir.file("out"), {"--lora", lora});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "weight_storage")) << mixed.err;
}

TEST(WeightStorageE2E, UnknownValuesAreRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  RunResult bad = generate(dir, dir.file("out"), {"--weight-storage", "fp4"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--weight-storage: expected default, fp8 or fp8-denoiser, got 'fp4'")) << bad.err;
  EXPECT_FALSE(contains(bad.err, "terminate")) << bad.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

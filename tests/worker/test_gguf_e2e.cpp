// GGUF transformer files end to end (issue 26): `--model FILE.gguf --base DIR` makes diffusers' GGUF image
// (make_gguf_fixtures.py's golden; the bit-for-bit check is PipelineParity's), says the file's storage in
// every record, infotext and run.json, and resume refuses to mix its images with those of another storage.
// A truncated file is refused in one line with exit status 2; LoRAs run unfused beside the quantized weights
// (make_lora_storage_fixtures.py's golden) and are recorded with the storage.
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

const std::string kData = std::string(DPINFER_TEST_DATA_DIR);
const std::string kDev = kData + "/pipelines/tiny-flux-dev";
const std::string kQ8 = kData + "/gguf/tiny-flux-dev-q8_0.gguf";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// The golden case default_steps_28: seed 0, the family's defaults, 16x16.
RunResult generate(const TempDir& dir, const std::string& model, const std::string& out,
                   const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", model, "--dtype",
                                   "bf16", "--width", "16", "--height", "16", "--out", out};
  if (model != kDev) argv.insert(argv.end(), {"--base", kDev});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv, kEnv, 300s);
}


TEST(GgufE2E, AGgufFileMakesDiffusersGgufImageAndSaysSo) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a photograph of an astronaut riding a horse\n");
  RunResult gguf = generate(dir, kQ8, dir.file("gguf"), {});
  ASSERT_EQ(gguf.exit_code, 0) << gguf.err;
  const DecodedPng image = read_png(dir.file("gguf/000000.png"));
  // Bit for bit on the golden's machine (PipelineParity); any CPU within the cross-CPU bound of a bf16 image.
  EXPECT_LE(mean_distance_from_golden(image.pixels, kData + "/pipelines/tiny-flux-dev.golden/gguf/images.safetensors",
                          "tiny_flux_dev_q8_0_default_steps_28"),
            2.0);
  EXPECT_TRUE(contains(image.texts.at("parameters"), ", Weight storage: gguf-Q8_0")) << image.texts.at("parameters");
  EXPECT_EQ(read_jsonl(dir.file("gguf/metadata.jsonl")).at(0)["weight_storage"], "gguf-Q8_0");
  const nlohmann::json run_json = nlohmann::json::parse(read_file(dir.file("gguf/run.json")));
  EXPECT_EQ(run_json["pipeline"]["weight_storage"], "gguf-Q8_0");

  // Resume compares the storage: the directory's bf16 weights may not add to a GGUF run's images.
  RunResult mixed = generate(dir, kDev, dir.file("gguf"), {});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with weight_storage \"gguf-Q8_0\"")) << mixed.err;
  EXPECT_EQ(generate(dir, kQ8, dir.file("gguf"), {}).exit_code, 0);
}

TEST(GgufE2E, BrokenFilesAreRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  const std::string bytes = read_file(kQ8);
  write_file(dir.file("cut.gguf"), bytes.substr(0, bytes.size() / 2));
  RunResult cut = generate(dir, dir.file("cut.gguf"), dir.file("out"), {});
  EXPECT_EQ(cut.exit_code, 2) << cut.err;
  EXPECT_TRUE(contains(cut.err, "cut.gguf")) << cut.err;
  EXPECT_TRUE(contains(cut.err, "truncated")) << cut.err;
  EXPECT_FALSE(contains(cut.err, "terminate")) << cut.err;
}

TEST(GgufE2E, LorasRunUnfusedOnTheQuantizedWeightsAndAreRecorded) {
  // make_lora_storage_fixtures.py's gguf_mixed_peft: flux-peft on tiny-flux-dev-mixed.gguf, PEFT's unfused LoRA
  // layers beside the GGUF ones, the CLIP's merged (the bit-for-bit check is PipelineParity's).
  TempDir dir;
  write_file(dir.file("p.txt"), "a photograph of an astronaut riding a horse\n");
  const std::string mixed = kData + "/gguf/tiny-flux-dev-mixed.gguf";
  const std::string lora = kData + "/loras-dit/flux-peft.safetensors";
  RunResult run1 = generate(dir, mixed, dir.file("out"), {"--lora", lora});
  ASSERT_EQ(run1.exit_code, 0) << run1.err;
  const DecodedPng image = read_png(dir.file("out/000000.png"));
  EXPECT_LE(mean_distance_from_golden(image.pixels, kData + "/pipelines/tiny-flux-dev.golden/lora-storage/images.safetensors",
                                      "gguf_mixed_peft"),
            2.0);
  const nlohmann::json record = read_jsonl(dir.file("out/metadata.jsonl")).at(0);
  EXPECT_EQ(record["weight_storage"], "gguf-Q5_1");
  ASSERT_EQ(record["loras"].size(), 1u) << record.dump();
  EXPECT_EQ(record["loras"][0]["name"], "flux-peft") << record.dump();
  EXPECT_EQ(record["lora_paths"][0], lora) << record.dump();
  EXPECT_EQ(generate(dir, mixed, dir.file("out"), {"--lora", lora}).exit_code, 0);  // resume: the same identity
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

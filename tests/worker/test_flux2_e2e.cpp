// A FLUX.2 [klein] pipeline through the commands a user runs (dpinfer generate, launch, inspect) on the
// tiny-flux2-klein and tiny-flux2-klein-base fixtures: the images are diffusers' own
// (tools/fixtures/make_flux2_pipelines.py, diffusers 0.37.0), a JSONL line's settings reach its image and its
// record, an image does not depend on its batch-mates or rank, a negative prompt and a LoRA are refused in one
// line, and inspect reports the family and its components.
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

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-flux2-klein";
const std::string kBase = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-flux2-klein-base";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P: the prompt of the golden cases.
const char* kPrompt = "a photograph of an astronaut riding a horse";


// Three prompts of very different lengths, on the Base model with CFG: one batch of three, three batches of
// one and three ranks give the same images.
TEST(Flux2E2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), json({{"prompt", "a very long prompt about a city on a turtle, with airships, "
                                                   "gardens, waterfalls and lanterns at golden hour"},
                                        {"seed", 5}})
                                          .dump() +
                                      "\n" + json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                                      json({{"prompt", "a red cube"}, {"seed", 7}}).dump() + "\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kBase, "--steps", "2", "--width", "48",
                                           "--height", "32", "--set", "max_sequence_length=64"};
  expect_batch_and_rank_independence(dir, common, kEnv);
}

// Golden cases "default" (seed 0, 4 steps, guidance 4 ignored: distilled), "max_sequence_length_40" (a JSONL
// line's setting) and "steps_1".
TEST(Flux2E2E, GenerateMakesDiffusersImagesWithEachLinesSettings) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"" + std::string(kPrompt) + "\"}\n" + "{\"prompt\": \"" + kPrompt +
                                      "\", \"seed\": 0, \"settings\": {\"max_sequence_length\": 40}}\n" +
                                      "{\"prompt\": \"" + kPrompt + "\", \"seed\": 0, \"steps\": 1}\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "4",
                     "--width", "32", "--height", "32", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string golden = kModel + ".golden/images.safetensors";
  expect_png_matches_golden(dir.file("out/000000.png"), golden, "default");
  expect_png_matches_golden(dir.file("out/000001.png"), golden, "max_sequence_length_40");
  expect_png_matches_golden(dir.file("out/000002.png"), golden, "steps_1");
  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["guidance_scale"], 4.0);
  EXPECT_EQ(rows[0]["max_sequence_length"], 512);
  EXPECT_EQ(rows[1]["max_sequence_length"], 40);
}

TEST(Flux2E2E, ANegativePromptAndAnotherFamilysLoraAreRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"x\", \"negative_prompt\": \"blurry\"}\n");
  RunResult neg = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kBase, "--steps", "1",
                       "--width", "32", "--height", "32", "--out", dir.file("neg")},
                      kEnv, 300s);
  EXPECT_NE(neg.exit_code, 0);
  EXPECT_TRUE(contains(neg.err, "FLUX.2 [klein] takes no negative prompt")) << neg.err;
  const std::string lora = std::string(DPINFER_TEST_DATA_DIR) + "/loras/tiny-sd1-lora.safetensors";
  RunResult with_lora = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps",
                             "1", "--width", "32", "--height", "32", "--lora", lora, "--out", dir.file("lora")},
                            kEnv, 300s);
  EXPECT_EQ(with_lora.exit_code, 2) << with_lora.err;
  EXPECT_TRUE(contains(with_lora.err, "tiny-sd1-lora.safetensors")) << with_lora.err;
}

// A FLUX.2 LoRA in BFL's names (make_flux2_lora_fixtures.py) through --lora: diffusers' image with it fused
// (LoraImageParity-style goldens hold the pixels; here the worker's side), named in the record.
TEST(Flux2E2E, ABflNamedLoraMakesItsImageAndIsRecorded) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a photograph of an astronaut riding a horse\n");
  const std::string lora = std::string(DPINFER_TEST_DATA_DIR) + "/loras-flux2/flux2-bfl.safetensors";
  auto generate = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kModel, "--steps",
                                  "3", "--width", "32", "--height", "32", "--seed", "3", "--out", dir.file(out)};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a, kEnv, 300s);
  };
  RunResult with = generate("with", {"--lora", lora + ":0.75"});
  ASSERT_EQ(with.exit_code, 0) << with.err;
  RunResult without = generate("without", {});
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_NE(read_png(dir.file("with/000000.png")).pixels, read_png(dir.file("without/000000.png")).pixels);
  const std::vector<json> rows = read_jsonl(dir.file("with/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(contains(rows[0].dump(), "flux2-bfl.safetensors")) << rows[0].dump();
}

TEST(Flux2E2E, InspectReportsTheFamilyAndItsComponents) {
  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "Flux2KleinPipeline");
  EXPECT_EQ(report["family"], "flux2");
  EXPECT_EQ(report["ok"], true);
  EXPECT_EQ(report["default_size"], json({{"width", 256}, {"height", 256}}));  // 128 x the tiny VAE's factor 2
  EXPECT_EQ(report["components"]["transformer"]["class"], "Flux2Transformer2DModel");
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "Qwen3ForCausalLM");
  EXPECT_EQ(report["components"]["vae"]["class"], "AutoencoderKLFlux2");
  EXPECT_EQ(report["components"]["scheduler"]["dpinfer_name"], "flow_match_euler");
  EXPECT_EQ(report["settings"], json({{"max_sequence_length", 512}, {"text_encoder_out_layers", {9, 18, 27}}}));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// A FLUX.2 [dev] pipeline (diffusers' Flux2Pipeline: Mistral 3 text encoder, the guidance scale as the
// transformer's guidance input) through the commands a user runs (dpinfer generate, launch, status, merge,
// inspect) on the tiny-flux2-dev fixture: the images are diffusers' own (tools/fixtures/make_flux2_dev_pipelines.py,
// diffusers 0.37.0), a line's guidance and settings reach its image and record, an image does not depend on its
// batch-mates, ranks, shards or a resume, a negative prompt is refused in one line, and inspect reports the family;
// and FLUX.2's BFL single files and GGUF files run with --base.
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

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-flux2-dev";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P: the prompt of the golden cases.
const char* kPrompt = "a photograph of an astronaut riding a horse";

// Golden cases "default" (seed 0, 4 steps, guidance 4 into the guidance embedding), "guidance_2_5" (a line's
// guidance), "max_sequence_length_96" (a line's setting) and "img_token_removed".
TEST(Flux2DevE2E, GenerateMakesDiffusersImagesWithEachLinesGuidanceAndSettings) {
  TempDir dir;
  const std::string p(kPrompt);
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"" + p + "\"}\n" + "{\"prompt\": \"" + p +
                                      "\", \"seed\": 0, \"guidance_scale\": 2.5}\n" + "{\"prompt\": \"" + p +
                                      "\", \"seed\": 0, \"settings\": {\"max_sequence_length\": 96}}\n" +
                                      "{\"prompt\": \"a [IMG]cat[IMG] on a mat\", \"seed\": 0}\n" + "{\"prompt\": \"" + p +
                                      "\", \"seed\": 0, \"settings\": {\"text_encoder_out_layers\": [0, 15, 31]}}\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "4",
                     "--width", "32", "--height", "32", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string golden = kModel + ".golden/images.safetensors";
  expect_png_matches_golden(dir.file("out/000000.png"), golden, "default");
  expect_png_matches_golden(dir.file("out/000001.png"), golden, "guidance_2_5");
  expect_png_matches_golden(dir.file("out/000002.png"), golden, "max_sequence_length_96");
  expect_png_matches_golden(dir.file("out/000003.png"), golden, "img_token_removed");
  expect_png_matches_golden(dir.file("out/000004.png"), golden, "text_encoder_out_layers_0_15_31");
  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[4]["text_encoder_out_layers"], json({0, 15, 31}));
  EXPECT_EQ(rows[0]["text_encoder_out_layers"], json({10, 20, 30}));
  EXPECT_EQ(rows[0]["guidance_scale"], 4.0);  // the row's default, Flux2Pipeline.__call__'s
  EXPECT_EQ(rows[1]["guidance_scale"], 2.5);
  EXPECT_EQ(rows[0]["max_sequence_length"], 512);
  EXPECT_EQ(rows[2]["max_sequence_length"], 96);
}

// Five prompts of very different lengths (left-padded Tekken tokens): generate alone, launch on 2 and 3 ranks,
// two shards (merged) and a resume give the same PNGs byte for byte; one batch of three and three of one the same images.
TEST(Flux2DevE2E, AnImageDoesNotDependOnItsBatchRanksShardsOrResume) {
  TempDir dir;
  std::string lines, first_three;
  const std::vector<std::string> prompts = {"a very long prompt about a city on a turtle, with airships, gardens, "
                                            "waterfalls and lanterns at golden hour",
                                            "", "a red cube", "café crème brûlée, 東京の夜景 🌃", "a blue sphere"};
  for (size_t i = 0; i < prompts.size(); ++i) {
    lines += json({{"prompt", prompts[i]}, {"seed", 30 + static_cast<int>(i)}}).dump() + "\n";
    if (i == 2) first_three = lines;
  }
  write_file(dir.file("p.jsonl"), lines);
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kModel, "--steps", "2", "--width", "48",
                                           "--height", "32", "--set", "max_sequence_length=64"};
  expect_same_pngs_whatever_the_ranks(dir, common, kEnv);
  // The two outer shards' manifests merged: every item once.
  RunResult merge = run({DPINFER_BINARY, "merge", dir.file("shards")}, kEnv, 60s);
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  EXPECT_EQ(read_jsonl(dir.file("shards/metadata.jsonl")).size(), prompts.size());
  write_file(dir.file("three.jsonl"), first_three);
  std::vector<std::string> three = common;
  three[0] = dir.file("three.jsonl");
  expect_batch_and_rank_independence(dir, three, kEnv);
}

TEST(Flux2DevE2E, ANegativePromptAndLayersTheModelCannotStackAreRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"x\", \"negative_prompt\": \"blurry\"}\n");
  RunResult neg = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kModel, "--steps", "1",
                       "--width", "32", "--height", "32", "--out", dir.file("neg")},
                      kEnv, 300s);
  EXPECT_NE(neg.exit_code, 0);
  EXPECT_TRUE(contains(neg.err, "FLUX.2 [dev] takes no negative prompt")) << neg.err;
  // Two hidden states where the transformer takes three; a state the 31-layer text encoder does not have.
  for (const auto& [layers, expected] : std::vector<std::pair<std::string, std::string>>{
           {"[10,20]", "transformer config: joint_attention_dim 48 is not 2 times the text encoder's hidden_size 16"},
           {"[10,20,32]", "text_encoder config: num_hidden_layers 31 is below 32"}}) {
    write_file(dir.file("p.txt"), "x\n");
    RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kModel, "--steps", "1",
                         "--width", "32", "--height", "32", "--set", "text_encoder_out_layers=" + layers, "--out",
                         dir.file("bad")},
                        kEnv, 300s);
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    EXPECT_TRUE(contains(bad.err, "--set: " + expected)) << bad.err;
    EXPECT_EQ(occurrences(bad.err, "\n"), 1u) << bad.err;
  }
}

TEST(Flux2DevE2E, InspectReportsTheFamilyAndItsComponents) {
  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "Flux2Pipeline");
  EXPECT_EQ(report["family"], "flux2-dev");
  EXPECT_EQ(report["ok"], true);
  EXPECT_EQ(report["default_size"], json({{"width", 256}, {"height", 256}}));  // 128 x the tiny VAE's factor 2
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "Mistral3ForConditionalGeneration");
  EXPECT_EQ(report["components"]["tokenizer"]["class"], "PixtralProcessor");
  EXPECT_EQ(report["components"]["vae"]["class"], "AutoencoderKLFlux2");
  EXPECT_EQ(report["settings"], json({{"max_sequence_length", 512}, {"text_encoder_out_layers", {10, 20, 30}}}));
}

// FLUX.2 single files (make_flux2_single_file_fixtures.py): BFL's layout under ComfyUI's prefix with --base makes
// diffusers' from_single_file image (the folder's own: the same weights); the file alone names the base it needs;
// [klein]'s GGUF file makes diffusers' GGUF image and says its storage.
TEST(Flux2DevE2E, BflSingleFilesAndGgufFilesRunWithTheirBase) {
  TempDir dir;
  const std::string data = std::string(DPINFER_TEST_DATA_DIR);
  const std::string file = data + "/single_file/tiny-flux2-dev-comfy.safetensors";
  write_file(dir.file("p.txt"), std::string(kPrompt) + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", file, "--base", kModel, "--steps",
                     "4", "--width", "32", "--height", "32", "--seed", "0", "--out", dir.file("file")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_png_matches_golden(dir.file("file/000000.png"), kModel + ".golden/single-file/images.safetensors",
                            "single_file_fp32_default");
  RunResult alone = run({DPINFER_BINARY, "inspect", file}, kEnv, 120s);
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_TRUE(contains(alone.err, "is a FLUX.2 [dev] single file, which holds no tokenizers; pass --base")) << alone.err;
  EXPECT_TRUE(contains(alone.err, "black-forest-labs/FLUX.2-dev")) << alone.err;
  RunResult with_base = run({DPINFER_BINARY, "inspect", file, "--base", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(with_base.exit_code, 0) << with_base.err;
  EXPECT_EQ(json::parse(with_base.out)["family"], "flux2-dev");
  // A [klein] file given a [dev] base: one line naming both.
  RunResult wrong = run({DPINFER_BINARY, "inspect", data + "/single_file/tiny-flux2-klein-bfl.safetensors", "--base",
                         kModel},
                        kEnv, 120s);
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_TRUE(contains(wrong.err, "is a FLUX.2 [klein] checkpoint but --base")) << wrong.err;

  const std::string klein = data + "/pipelines/tiny-flux2-klein";
  RunResult gguf = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model",
                        data + "/gguf/tiny-flux2-klein-q8_0.gguf", "--base", klein, "--dtype", "bf16", "--steps", "4",
                        "--width", "32", "--height", "32", "--seed", "0", "--out", dir.file("gguf")},
                       kEnv, 300s);
  ASSERT_EQ(gguf.exit_code, 0) << gguf.err;
  // Bit for bit on the golden's machine (PipelineParity); any CPU within the cross-CPU bound of a bf16 image.
  EXPECT_LE(mean_distance_from_golden(read_png(dir.file("gguf/000000.png")).pixels,
                                      klein + ".golden/gguf/images.safetensors", "tiny_flux2_klein_q8_0_default"),
            2.0);
  EXPECT_EQ(read_jsonl(dir.file("gguf/metadata.jsonl")).at(0)["weight_storage"], "gguf-Q8_0");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

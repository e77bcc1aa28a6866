// FLUX.1 pipelines through the commands a user runs (dpinfer generate, launch, inspect) on the
// tiny-flux-dev and tiny-flux-schnell fixtures: the images are diffusers' own
// (tools/fixtures/make_flux_pipelines.py recorded them), a JSONL line's steps, guidance and settings
// reach its image, its record and its infotext, a schnell-like model (no guidance embeds) defaults to
// 4 steps and guidance 0, an image does not depend on its batch-mates or rank, and inspect reports the
// family and its settings.
#include <gtest/gtest.h>

#include <filesystem>
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
const std::string kDev = kPipelines + "tiny-flux-dev";
const std::string kSchnell = kPipelines + "tiny-flux-schnell";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};
// make_pipelines.py's P and NEG: the prompt and negative prompt of the golden cases.
const char* kPrompt = "a photograph of an astronaut riding a horse";
const char* kNegative = "blurry, low quality, watermark";

/// Issue 4's bound between a PNG and the golden case `name` of fixture `model` (tiny-flux-dev or -schnell).
void expect_golden(const std::string& png_path, const std::string& model, const std::string& name) {
  expect_png_matches_golden(png_path, kPipelines + model + ".golden/images.safetensors", name);
}


// dpinfer's promise: an image depends on its own prompt and seed only. Three prompts of very
// different lengths, one with true CFG: one batch of three, three batches of one and three ranks
// give the same images, to float rounding (a batch runs other shapes).
TEST(FluxE2E, AnImageDoesNotDependOnItsBatchOrRank) {
  TempDir dir;
  const char* kLong =
      "an extremely detailed matte painting of a sprawling futuristic city built on the back of a giant turtle "
      "swimming through a sea of clouds at golden hour, with airships, hanging gardens, waterfalls pouring off the "
      "shell, tiny people crossing rope bridges, lanterns glowing in thousands of windows";
  write_file(dir.file("p.jsonl"),
             json({{"prompt", kLong}, {"negative_prompt", "blurry"}, {"seed", 5},
                   {"settings", {{"true_cfg_scale", 2.0}}}})
                     .dump() +
                 "\n" + json({{"prompt", ""}, {"seed", 6}}).dump() + "\n" +
                 json({{"prompt", "a red cube"}, {"negative_prompt", "ugly"}, {"seed", 7}}).dump() + "\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kDev, "--steps", "2", "--width", "32",
                                           "--height", "16"};
  expect_batch_and_rank_independence(dir, common, kEnv);
}

// tiny-flux-dev's golden cases "default_steps_28" (seed 0, the family's 28 steps and guidance 3.5),
// "guidance_5" (seed 3, 2 steps) and "true_cfg" (seed 30, 3 steps, the negative prompt, true_cfg_scale 2),
// all 16x16.
TEST(FluxE2E, GenerateMakesDiffusersImagesWithEachLinesSettings) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             json({{"prompt", kPrompt}, {"seed", 0}}).dump() + "\n" +
                 json({{"prompt", kPrompt}, {"seed", 3}, {"steps", 2}, {"guidance_scale", 5.0}}).dump() + "\n" +
                 json({{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"seed", 30}, {"steps", 3},
                       {"settings", {{"true_cfg_scale", 2.0}}}})
                     .dump() +
                 "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kDev, "--width", "16",
                     "--height", "16", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_golden(dir.file("out/000000.png"), "tiny-flux-dev", "default_steps_28");
  expect_golden(dir.file("out/000001.png"), "tiny-flux-dev", "guidance_5");
  expect_golden(dir.file("out/000002.png"), "tiny-flux-dev", "true_cfg");

  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["steps"], 28);
  EXPECT_EQ(rows[0]["guidance_scale"], 3.5);
  EXPECT_EQ(rows[0]["scheduler"], "flow_match_euler");
  EXPECT_EQ(rows[0]["settings"],
            json({"max_sequence_length", "true_cfg_scale", "first_block_cache", "dbcache", "dbcache_fn", "dbcache_bn",
                  "dbcache_warmup", "dbcache_max_cached", "dbcache_max_continuous", "taylorseer_order"}));
  EXPECT_EQ(rows[0]["first_block_cache"], 0.0);  // off by default
  EXPECT_EQ(rows[0]["dbcache"], 0.0);            // off by default
  EXPECT_EQ(rows[0]["dbcache_fn"], 8);           // cache-dit's DBCacheConfig defaults
  EXPECT_EQ(rows[0]["taylorseer_order"], 0);
  EXPECT_EQ(rows[0]["max_sequence_length"], 512);
  EXPECT_EQ(rows[0]["true_cfg_scale"], 1.0);
  EXPECT_EQ(rows[1]["guidance_scale"], 5.0);
  EXPECT_EQ(rows[2]["true_cfg_scale"], 2.0);
  const std::string params = read_png(dir.file("out/000002.png")).texts.at("parameters");
  EXPECT_NE(params.find("Seed: 30, Size: 16x16"), std::string::npos) << params;
  EXPECT_NE(params.find("True CFG scale: 2"), std::string::npos) << params;

  // A setting of another family is bad input, named with its line and FLUX.1's own settings.
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"settings\": {\"clip_skip\": 1}}\n");
  RunResult bad = run({DPINFER_WORKER_BINARY, "generate", dir.file("bad.jsonl"), "--model", kDev, "--steps", "1",
                       "--width", "16", "--height", "16", "--out", dir.file("bad")},
                      kEnv, 300s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'" + dir.file("bad.jsonl") +
                                    "' line 1: 'clip_skip' is not a setting of FLUX.1 models; their settings: "
                                    "max_sequence_length, true_cfg_scale"))
      << bad.err;
}

// Issue 14's LoRAs on a DiT: one process, a JSONL file whose consecutive lines use different LoRA
// sets (two with scales, another at 0.75, none, one), batched where they may be. Each image is
// diffusers' with those LoRAs fused (tools/fixtures/make_dit_lora_fixtures.py), the pipeline loads
// once, and the image without LoRA is the model's own. A kohya FLUX.1 LoRA is refused in one line.
TEST(FluxE2E, JsonlLinesWithDifferentLoraSetsInOneProcessAreDiffusersOwn) {
  TempDir dir;
  const std::string loras = std::string(DPINFER_TEST_DATA_DIR) + "/loras-dit/";
  const auto line = [&](const json& set) {
    json j = {{"prompt", kPrompt}, {"seed", 3}};
    if (!set.empty()) j["loras"] = set;
    return j.dump() + "\n";
  };
  write_file(dir.file("p.jsonl"),
             line(json::array({{{"path", loras + "flux-peft.safetensors"}, {"scale", 0.5}},
                               {{"path", loras + "flux-alpha.safetensors"}, {"scale", -0.75}}})) +
                 line(json::array({loras + "flux-alpha.safetensors:0.75"})) + line(json::array()) +
                 line(json::array({loras + "flux-peft.safetensors"})));
  const std::vector<std::string> args = {DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kDev,
                                         "--steps", "3", "--guidance-scale", "3.5", "--width", "16", "--height", "16",
                                         "--batch-size", "4", "--out", dir.file("out"), "-v"};
  RunResult r = run(args, kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(occurrences(r.err, "pipeline loaded"), 1u) << r.err;
  const std::string golden = loras + "tiny-flux-dev-lora.golden/images.safetensors";
  const std::vector<std::string> cases = {"two", "other_scaled", "", "one"};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    DecodedPng png = read_png(dir.file("out/00000" + std::to_string(i) + ".png"));
    if (cases[i].empty()) {
      // The LoRAs merged before it were taken out: the model's own image.
      write_file(dir.file("plain.txt"), std::string(kPrompt) + "\n");
      RunResult p = run({DPINFER_WORKER_BINARY, "generate", dir.file("plain.txt"), "--model", kDev, "--steps", "3",
                         "--guidance-scale", "3.5", "--width", "16", "--height", "16", "--seed", "3", "--out",
                         dir.file("plain")},
                        kEnv, 300s);
      ASSERT_EQ(p.exit_code, 0) << p.err;
      EXPECT_EQ(read_png(dir.file("plain/000000.png")).pixels, png.pixels);
      continue;
    }
    expect_pixels_match_golden(png.pixels, golden, cases[i]);
  }
  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["loras"][1]["name"], "flux-alpha");
  EXPECT_EQ(rows[0]["loras"][1]["scale"], -0.75);

  RunResult bfl = run({DPINFER_WORKER_BINARY, "generate", dir.file("plain.txt"), "--model", kDev, "--steps", "1",
                       "--width", "16", "--height", "16", "--lora", loras + "flux-bfl-peft.safetensors", "--out",
                       dir.file("bfl")},
                      kEnv, 300s);
  EXPECT_EQ(bfl.exit_code, 2) << bfl.err;
  EXPECT_TRUE(contains(bfl.err, "flux-bfl-peft.safetensors': a LoRA in BFL's FLUX.1 block names with lora_A")) << bfl.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bfl/000000.png")));
}

// A kohya / sd-scripts FLUX.1 LoRA in BFL's block names through the worker: the image diffusers makes with
// it fused (tiny-flux-dev-kohya-lora.golden, case "one"), and a warning for each kind of layer that
// diffusers drops (lora_te1_ CLIP layers, img_in / final_layer).
TEST(FluxE2E, KohyaLoraInBflNamesIsDiffusersOwnAndSaysWhatItDrops) {
  TempDir dir;
  const std::string loras = std::string(DPINFER_TEST_DATA_DIR) + "/loras-dit/";
  write_file(dir.file("p.txt"), std::string(kPrompt) + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", kDev, "--steps", "3",
                     "--guidance-scale", "3.5", "--width", "16", "--height", "16", "--seed", "3", "--lora",
                     loras + "flux-kohya.safetensors", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "flux-kohya.safetensors': ignoring text-encoder layers other than CLIP's lora_te_ ones"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "ignoring embedder and final-layer layers")) << r.err;
  expect_png_matches_golden(dir.file("out/000000.png"), loras + "tiny-flux-dev-kohya-lora.golden/images.safetensors",
                            "one");
}

// A schnell-like model (no guidance embeds) defaults to 4 steps and records guidance 0: golden case
// "schnell_4_steps_guidance_0" (seed 40, 32x32).
TEST(FluxE2E, SchnellDefaultsToFourStepsWithoutGuidance) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), json({{"prompt", kPrompt}, {"seed", 40}}).dump() + "\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", kSchnell, "--width", "32",
                     "--height", "32", "--out", dir.file("out")},
                    kEnv, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_golden(dir.file("out/000000.png"), "tiny-flux-schnell", "schnell_4_steps_guidance_0");
  const std::vector<json> rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["steps"], 4);
  EXPECT_EQ(rows[0]["guidance_scale"], 0.0);
}

TEST(FluxE2E, InspectReportsTheFamilyAndItsSettings) {
  RunResult inspect = run({DPINFER_BINARY, "inspect", kDev, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "FluxPipeline");
  EXPECT_EQ(report["family"], "flux");
  EXPECT_EQ(report["ok"], true);
  // default_sample_size 128 times the tiny VAE's scale factor 1
  EXPECT_EQ(report["default_size"], json({{"width", 128}, {"height", 128}}));
  EXPECT_EQ(report["components"]["transformer"]["class"], "FluxTransformer2DModel");
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "CLIPTextModel");
  EXPECT_EQ(report["components"]["text_encoder_2"]["class"], "T5EncoderModel");
  EXPECT_EQ(report["components"]["vae"]["class"], "AutoencoderKL");
  EXPECT_EQ(report["components"]["scheduler"]["dpinfer_name"], "flow_match_euler");
  EXPECT_EQ(report["settings"],
            json({{"max_sequence_length", 512},
                  {"true_cfg_scale", 1.0},
                  {"first_block_cache", 0.0},
                  {"dbcache", 0.0},
                  {"dbcache_fn", 8},
                  {"dbcache_bn", 0},
                  {"dbcache_warmup", 8},
                  {"dbcache_max_cached", -1},
                  {"dbcache_max_continuous", -1},
                  {"taylorseer_order", 0}}));

  RunResult text = run({DPINFER_BINARY, "inspect", kSchnell}, kEnv, 120s);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "family: flux\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "settings: max_sequence_length=512, true_cfg_scale=1.0, first_block_cache=0.0, "
                                 "dbcache=0.0, dbcache_fn=8, dbcache_bn=0, dbcache_warmup=8, dbcache_max_cached=-1, "
                                 "dbcache_max_continuous=-1, taylorseer_order=0 (the defaults; --set NAME=VALUE)\n"))
      << text.out;
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(FluxE2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kDev, {"--width", "32", "--height", "16"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

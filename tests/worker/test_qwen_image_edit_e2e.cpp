// Qwen-Image-Edit pipelines (diffusers' QwenImageEditPipeline: the input image through the Qwen2.5-VL vision tower
// into the prompt, and its VAE latents after the noise's in the transformer's sequence; QwenImageEditPlusPipeline,
// Qwen-Image-Edit-2509: several input images) through the commands a user runs (dpinfer generate, launch, status,
// merge, inspect) on tiny-qwen-image-edit and tiny-qwen-image-edit-plus. PipelineParity holds the pixels to
// diffusers (tools/fixtures/make_qwen_image_edit_pipelines.py); this checks what the worker adds around it: the
// reference sized to about 1024^2 pixels for its own aspect ratio, an item's unset size taken from it, the records
// without a strength, that an image depends neither on its batch (references of two sizes in one batch), ranks,
// shards nor a resume, and the refusals.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/run_outputs.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kModel = kData + "/pipelines/tiny-qwen-image-edit";
const std::string kGolden = kModel + ".golden/edit/images.safetensors";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

RunResult worker_generate(const std::vector<std::string>& a) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate"};
  argv.insert(argv.end(), a.begin(), a.end());
  return run(argv, kEnv, 600s);
}

// The golden cases "fp32_size_from_reference" (no size: 1024x1024 from the 64x64 reference),
// "fp32_reference_non_square" (70x52, whose reference is 1184x896, drawn at 32x48) and "fp32_true_cfg_negative" (a
// negative prompt and true CFG).
TEST(QwenImageEditE2E, GenerateMakesDiffusersImagesAndTakesTheSizeFromTheReference) {
  TempDir dir;
  copy_input_images(dir,
                    {{"img2img-0.png", "square.png"}, {"img2img-1.png", "wide.png"}, {"img2img-2.png", "other.png"}});
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"make the horse purple\", \"image\": \"square.png\", \"seed\": 0, \"steps\": 2}\n"
             "{\"prompt\": \"turn it into a painting\", \"image\": \"wide.png\", \"seed\": 5, \"steps\": 3, "
             "\"width\": 32, \"height\": 48}\n"
             "{\"prompt\": \"make the horse purple\", \"negative_prompt\": \"blurry\", \"image\": \"other.png\", "
             "\"seed\": 3, \"steps\": 3, \"width\": 32, \"height\": 32}\n");
  RunResult r = worker_generate({dir.file("p.jsonl"), "--model", kModel, "--out", dir.file("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_png_matches_golden(dir.file("out/000000.png"), kGolden, "fp32_size_from_reference");
  expect_png_matches_golden(dir.file("out/000001.png"), kGolden, "fp32_reference_non_square");
  expect_png_matches_golden(dir.file("out/000002.png"), kGolden, "fp32_true_cfg_negative");
  std::map<int, json> rows;
  for (const json& row : read_jsonl(dir.file("out/metadata.jsonl"))) rows[row["index"].get<int>()] = row;
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["width"], 1024);  // calculate_dimensions(1024 * 1024, 1.0)
  EXPECT_EQ(rows[0]["height"], 1024);
  EXPECT_EQ(rows[1]["width"], 32);
  for (const auto& [index, row] : rows) {
    EXPECT_FALSE(row.contains("max_sequence_length")) << row.dump();  // not a setting of the Edit pipeline
    EXPECT_EQ(row["input_image_hash"].get<std::string>().size(), 64u) << row.dump();
    EXPECT_FALSE(row.contains("strength")) << row.dump();  // a reference has no strength
    EXPECT_EQ(row["guidance_scale"], 4.0) << row.dump();    // true_cfg_scale's default
  }
  const std::string infotext = read_png(dir.file("out/000001.png")).texts.at("parameters");
  EXPECT_TRUE(contains(infotext, "Input image hash: ")) << infotext;
  EXPECT_FALSE(contains(infotext, "Denoising strength")) << infotext;
}

// A Qwen-Image-Edit transformer file (ComfyUI's qwen_image_edit_*.safetensors hold diffusers' names) has Qwen-Image's
// architecture, so nothing in it says Edit: with --base an Edit pipeline, the base's class runs it, with the vision
// tower from the base's text encoder, and the image is the folder's ("fp32_reference_non_square").
TEST(QwenImageEditE2E, ASingleTransformerFileRunsAsItsBasesEditPipeline) {
  TempDir dir;
  copy_input_images(dir, {{"img2img-1.png", "wide.png"}});
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"turn it into a painting\", \"image\": \"wide.png\", \"seed\": 5, "
                                  "\"steps\": 3, \"width\": 32, \"height\": 48}\n");
  const std::string file = kModel + "/transformer/diffusion_pytorch_model.safetensors";
  RunResult r = worker_generate({dir.file("p.jsonl"), "--model", file, "--base", kModel, "--out", dir.file("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_png_matches_golden(dir.file("out/000000.png"), kGolden, "fp32_reference_non_square");
  const json run_json = json::parse(read_file(dir.file("out/run.json")));
  EXPECT_EQ(run_json["pipeline"]["pipeline_class"], "QwenImageEditPipeline") << run_json.dump();
  EXPECT_EQ(run_json["pipeline"]["single_file"]["kind"], "qwen-image") << run_json.dump();
}

// Five items (two reference sizes, a negative prompt): generate alone, launch on 2 and 3 ranks, two shards (merged)
// and a resume give the same PNGs byte for byte; status finds the runs complete.
TEST(QwenImageEditE2E, AnImageDoesNotDependOnItsBatchRanksShardsOrResume) {
  TempDir dir;
  copy_input_images(dir, {{"img2img-0.png", "square.png"}, {"img2img-1.png", "wide.png"}});
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"make the horse purple\", \"image\": \"square.png\"}\n"
             "{\"prompt\": \"a red cube\", \"image\": \"wide.png\"}\n"
             "{\"prompt\": \"add a hat\", \"negative_prompt\": \"blurry\", \"image\": \"square.png\"}\n"
             "{\"prompt\": \"make the horse purple\", \"image\": \"wide.png\"}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": \"square.png\"}\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kModel, "--steps", "2", "--width", "32",
                                           "--height", "32", "--batch-size", "2"};
  expect_same_pngs_whatever_the_ranks(dir, common, kEnv);
  RunResult merge = run({DPINFER_BINARY, "merge", dir.file("shards")}, kEnv, 60s);
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  EXPECT_EQ(read_jsonl(dir.file("shards/metadata.jsonl")).size(), 5u);
  // Two-phase chunks encode each prompt with its image ahead (the vision tower reads the reference), then denoise:
  // the same pixels, and no batch had to encode its own.
  std::vector<std::string> chunked = {DPINFER_WORKER_BINARY, "generate"};
  chunked.insert(chunked.end(), common.begin(), common.end());
  chunked.insert(chunked.end(), {"--encode-chunk", "4", "--out", dir.file("chunked"), "--verbose"});
  RunResult two_phase = run(chunked, kEnv, 600s);
  ASSERT_EQ(two_phase.exit_code, 0) << two_phase.err;
  EXPECT_EQ(png_pixels(dir.file("chunked")), png_pixels(dir.file("shards")));
  EXPECT_FALSE(contains(two_phase.err, "ahead failed")) << two_phase.err;
  EXPECT_TRUE(contains(two_phase.err, "encoded 2 batch(es) of 4 item(s) ahead")) << two_phase.err;
}

TEST(QwenImageEditE2E, BadInputsAreOneLineEach) {
  TempDir dir;
  copy_input_images(dir, {{"img2img-0.png", "square.png"}, {"mask-0.png", "mask.png"}});
  const auto refused = [&](const std::string& jsonl, const std::vector<std::string>& extra, const std::string& what) {
    write_file(dir.file("bad.jsonl"), jsonl);
    std::vector<std::string> a = {dir.file("bad.jsonl"), "--model", kModel, "--out", dir.file("bad"), "--steps", "1",
                                  "--width", "32", "--height", "32"};
    a.insert(a.end(), extra.begin(), extra.end());
    RunResult r = worker_generate(a);
    EXPECT_NE(r.exit_code, 0) << jsonl << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, what)) << r.err;
    EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  };
  refused("{\"prompt\": \"x\", \"image\": \"square.png\", \"strength\": 0.5}\n", {},
          "which takes its image as a reference to edit");
  refused("{\"prompt\": \"x\", \"image\": \"square.png\", \"mask\": \"mask.png\"}\n", {}, "drop the mask");
  refused("{\"prompt\": \"x\"}\n", {},
          "bad.jsonl' line 1: tiny-qwen-image-edit is an edit model (QwenImageEditPipeline): every item needs an "
          "'image'");
  refused("{\"prompt\": \"x\", \"image\": \"square.png\"}\n", {"--set", "max_sequence_length=64"},
          "QwenImageEditPipeline does not cut the prompt's states");
  refused("{\"prompt\": \"x\", \"image\": \"square.png\", \"settings\": {\"max_sequence_length\": 64}}\n", {},
          "max_sequence_length");
}

// Qwen-Image-Edit-2509 (QwenImageEditPlusPipeline, tiny-qwen-image-edit-plus): a line's `image` lists its input images.
// The golden cases "fp32_two_images" and "fp32_size_from_last_image" (an item without a size takes the last image's
// 1024^2-pixel size, 1184x896); items with one, two and three images of two sizes make the same images in one batch
// as alone (ranks and resume are AnImageDoesNotDependOnItsBatchRanksShardsOrResume's, on the same code); a
// QwenImageEditPipeline folder refuses a list in one line.
TEST(QwenImageEditE2E, EditPlusTakesSeveralImagesPerItem) {
  TempDir dir;
  copy_input_images(dir,
                    {{"img2img-0.png", "square.png"}, {"img2img-1.png", "wide.png"}, {"img2img-2.png", "other.png"}});
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"put the cube beside the horse\", \"image\": [\"wide.png\", \"square.png\"], \"seed\": 1, "
             "\"steps\": 2, \"width\": 32, \"height\": 32}\n"
             "{\"prompt\": \"make the horse purple\", \"image\": [\"square.png\", \"wide.png\"], \"seed\": 4, "
             "\"steps\": 2}\n");
  const std::string plus = kData + "/pipelines/tiny-qwen-image-edit-plus";
  const std::string golden = plus + ".golden/edit/images.safetensors";
  RunResult r = worker_generate({dir.file("p.jsonl"), "--model", plus, "--out", dir.file("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_png_matches_golden(dir.file("out/000000.png"), golden, "fp32_two_images");
  expect_png_matches_golden(dir.file("out/000001.png"), golden, "fp32_size_from_last_image");
  std::map<int, json> rows;
  for (const json& row : read_jsonl(dir.file("out/metadata.jsonl"))) rows[row["index"].get<int>()] = row;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["width"], 1184);
  EXPECT_EQ(rows[1]["height"], 896);
  ASSERT_TRUE(rows[0]["input_image_hash"].is_array()) << rows[0].dump();
  EXPECT_EQ(rows[0]["input_image_hash"].size(), 2u);

  write_file(dir.file("q.jsonl"),
             "{\"prompt\": \"a red cube\", \"image\": \"square.png\"}\n"
             "{\"prompt\": \"a red cube\", \"image\": [\"wide.png\", \"square.png\"]}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": [\"square.png\", \"other.png\", \"wide.png\"]}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": [\"square.png\", \"wide.png\"], \"seed\": 7}\n");
  const auto args = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {dir.file("q.jsonl"), "--model", plus, "--out", dir.file(out), "--steps", "2",
                                  "--width", "32", "--height", "32"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  RunResult one = worker_generate(args("one", {}));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  RunResult batched = worker_generate(args("batched", {"--batch-size", "4"}));
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  const auto pixels = png_pixels(dir.file("one"));
  ASSERT_EQ(pixels.size(), 4u);
  EXPECT_EQ(png_pixels(dir.file("batched")), pixels);
  EXPECT_NE(pixels.at("000000.png"), pixels.at("000001.png"));  // another list of images, another image

  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"x\", \"image\": [\"square.png\", \"wide.png\"]}\n");
  RunResult bad = worker_generate({dir.file("bad.jsonl"), "--model", kModel, "--out", dir.file("bad")});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "bad.jsonl' line 1: 'image' lists 2 images, and tiny-qwen-image-edit "
                                "(QwenImageEditPipeline) takes one reference per item"))
      << bad.err;
}

TEST(QwenImageEditE2E, InspectReportsTheFamilyTheProcessorAndTheVisionTower) {
  RunResult inspect = run({DPINFER_BINARY, "inspect", kModel, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["pipeline"], "QwenImageEditPipeline");
  EXPECT_EQ(report["family"], "qwen-image");
  EXPECT_EQ(report["ok"], true) << report.dump();
  EXPECT_EQ(report["components"]["processor"]["class"], "Qwen2VLProcessor");
  EXPECT_EQ(report["components"]["text_encoder"]["class"], "Qwen2_5_VLForConditionalGeneration");
  // The vision tower, read from the text encoder's visual.* keys: its own key check and module size, which the memory
  // plan counts.
  const json& vision = report["components"]["text_encoder.visual"];
  EXPECT_EQ(vision["class"], "Qwen2_5_VisionTransformerPretrainedModel") << report.dump();
  EXPECT_EQ(vision["keys"]["ok"], true) << vision.dump();
  EXPECT_GT(vision["module"]["elements"].get<int64_t>(), 0) << vision.dump();
  EXPECT_EQ(vision["config"]["patch_size"], 14) << vision.dump();
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

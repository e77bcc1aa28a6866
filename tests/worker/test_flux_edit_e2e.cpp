// FLUX.1 Fill and Kontext end to end (issue 29). Fill: every item needs its image and mask, the defaults are
// FluxFillPipeline's. Kontext (item 4): items whose image is a reference to edit, through dpinfer-worker and
// the launcher, on tiny-flux-kontext (tiny-flux-dev's components under FluxKontextPipeline). PipelineParity holds the
// pixels to diffusers' FluxKontextPipeline; this checks what the worker adds around it: the reference resized for its
// own size (not the item's), the records and infotext without a strength, that an image depends neither on its batch
// (references of two sizes in one batch) nor on the world size, resume, and the refusals. FLUX.2 [klein]'s references
// (issue 30) likewise, cut to the size multiple.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/run_outputs.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kModel = kData + "/pipelines/tiny-flux-kontext";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

std::vector<std::string> kontext_args(const TempDir& dir, const std::string& prompts, const std::string& out,
                                      const std::vector<std::string>& extra = {}) {
  // auto_resize off: on, each reference becomes about 1 MP, which the tiny VAE (scale factor 1) keeps whole.
  std::vector<std::string> a = {dir.file(prompts), "--model", kModel, "--out", dir.file(out), "--steps", "3",
                                "--width", "16", "--height", "16", "--set", "auto_resize=false"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

/// dpinfer-worker generate with `a`, on the CPU with one thread.
RunResult worker_generate(const std::vector<std::string>& a) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate"};
  argv.insert(argv.end(), a.begin(), a.end());
  return run(argv, kEnv, 300s);
}

/// The prompts file and, beside it, a 64x64 and a 70x52 reference: a batch of two then holds two sizes.
void write_kontext_inputs(const TempDir& dir) {
  copy_input_images(dir, {{"img2img-0.png", "square.png"}, {"img2img-1.png", "wide.png"}});
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"make it purple\", \"image\": \"square.png\"}\n"
             "{\"prompt\": \"make it purple\", \"image\": \"wide.png\"}\n"
             "{\"prompt\": \"add a hat\", \"image\": \"square.png\", \"seed\": 7}\n"
             "{\"prompt\": \"add a hat\", \"image\": \"wide.png\", \"seed\": 7}\n");
}

TEST(KontextE2E, ReferencesOfTwoSizesWhateverTheBatchOrRanks) {
  TempDir dir;
  write_kontext_inputs(dir);
  RunResult one = worker_generate(kontext_args(dir, "p.jsonl", "one"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  RunResult batched = worker_generate(kontext_args(dir, "p.jsonl", "batched", {"--batch-size", "4"}));
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  RunResult ranks = run(two_rank_launch(DPINFER_WORKER_BINARY, free_port(),
                                        kontext_args(dir, "p.jsonl", "ranks", {"--batch-size", "2"})),
                        kEnv, 300s);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;
  // --offload model brings the VAE to the device to encode the references, then the denoiser: the same pixels.
  RunResult offloaded = worker_generate(kontext_args(dir, "p.jsonl", "offloaded", {"--offload", "model"}));
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  const auto pixels = png_pixels(dir.file("one"));
  ASSERT_EQ(pixels.size(), 4u);
  EXPECT_EQ(png_pixels(dir.file("offloaded")), pixels);
  // A batch of 4 runs each reference size as its own transformer call, so every image is its alone self.
  EXPECT_EQ(png_pixels(dir.file("batched")), pixels);
  EXPECT_EQ(png_pixels(dir.file("ranks")), png_pixels(dir.file("batched")));
  // The reference is what the image is made from: another reference, another image.
  EXPECT_NE(pixels.at("000000.png"), pixels.at("000001.png"));

  const auto rows = read_jsonl(dir.file("one/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& r : rows) {
    EXPECT_EQ(r["input_image_hash"].get<std::string>().size(), 64u) << r.dump();
    EXPECT_FALSE(r.contains("strength")) << r.dump();  // a reference has no strength
    EXPECT_EQ(r["width"], 16);                          // the item's size is the output's
    EXPECT_EQ(r["auto_resize"], false) << r.dump();  // a setting, named in the record's "settings" list
  }
  const std::string infotext = read_png(dir.file("one/000000.png")).texts.at("parameters");
  EXPECT_TRUE(contains(infotext, "Input image hash: ")) << infotext;
  EXPECT_FALSE(contains(infotext, "Denoising strength")) << infotext;
  EXPECT_TRUE(contains(infotext, "Kontext auto resize: false")) << infotext;

  RunResult again = worker_generate(kontext_args(dir, "p.jsonl", "one"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out + again.err, "0 generated, 4 skipped")) << again.err;
}

TEST(KontextE2E, AnItemWithoutImageIsFlux1TextToImage) {
  // FluxKontextPipeline without an image runs FluxPipeline's loop: the same image as tiny-flux-dev's.
  TempDir dir;
  write_file(dir.file("t.txt"), "a red cube\n");
  const std::vector<std::string> common = {"--steps", "3", "--width", "16", "--height", "16"};
  std::vector<std::string> a = {dir.file("t.txt"), "--model", kModel, "--out", dir.file("kontext")};
  a.insert(a.end(), common.begin(), common.end());
  ASSERT_EQ(worker_generate(a).exit_code, 0);
  std::vector<std::string> b = {dir.file("t.txt"), "--model", kData + "/pipelines/tiny-flux-dev", "--out",
                                dir.file("dev")};
  b.insert(b.end(), common.begin(), common.end());
  ASSERT_EQ(worker_generate(b).exit_code, 0);
  EXPECT_EQ(png_pixels(dir.file("kontext")), png_pixels(dir.file("dev")));
}

TEST(KontextE2E, BadInputsAreOneLineEach) {
  TempDir dir;
  write_kontext_inputs(dir);
  const auto refused = [&](const std::string& jsonl, const std::vector<std::string>& extra, const std::string& what) {
    write_file(dir.file("bad.jsonl"), jsonl);
    RunResult r = worker_generate(kontext_args(dir, "bad.jsonl", "bad", extra));
    EXPECT_EQ(r.exit_code, 2) << jsonl << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, what)) << r.err;
    EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  };
  refused("{\"prompt\": \"x\", \"image\": \"square.png\", \"strength\": 0.5}\n", {},
          "bad.jsonl' line 1: a strength for tiny-flux-kontext (FluxKontextPipeline), which takes its image as a "
          "reference to edit");
  refused("{\"prompt\": \"x\", \"image\": \"square.png\"}\n", {"--strength", "0.5"}, "drop the strength");
  refused("{\"prompt\": \"x\", \"image\": \"square.png\", \"mask\": \"wide.png\"}\n", {},
          "which takes its image as a reference to edit, not to inpaint; drop the mask");
  refused("{\"prompt\": \"x\", \"image\": [\"square.png\", \"wide.png\"]}\n", {},
          "bad.jsonl' line 1: 'image' lists 2 images, and tiny-flux-kontext (FluxKontextPipeline) takes one reference "
          "per item; give one path (several references are FLUX.2's and Qwen-Image-Edit-2509's)");
  refused("{\"prompt\": \"x\", \"image\": \"square.png\"}\n", {"--set", "first_block_cache=0.1"},
          "first_block_cache: FLUX.1 Kontext models (FluxKontextPipeline) run without First Block Cache");
  // auto_resize is Kontext's own: a FLUX.1 folder refuses it.
  write_file(dir.file("t.txt"), "a red cube\n");
  RunResult dev = worker_generate({dir.file("t.txt"), "--model", kData + "/pipelines/tiny-flux-dev", "--out",
                                    dir.file("dev"), "--set", "auto_resize=false"});
  EXPECT_EQ(dev.exit_code, 2) << dev.err;
  EXPECT_TRUE(contains(dev.err, "auto_resize")) << dev.err;
}

// FLUX.2 [klein] references (issue 30): PipelineParity holds the pixels to diffusers' Flux2KleinPipeline
// (make_flux2_reference_goldens.py); here, the worker's side. tiny-flux2-klein's size multiple is 4, so the 66x70
// reference is cut to its middle 64x68; with the 64x64 and 96x64 ones a batch holds three reference sizes, an
// item without one, and items with two references in either order.
TEST(Flux2ReferenceE2E, ReferencesOfThreeSizesWhateverTheBatchOrRanks) {
  TempDir dir;
  copy_input_images(dir, {{"img2img-0.png", "square.png"}, {"reference-0.png", "cut.png"}, {"reference-1.png", "wide.png"},
                    {"rgb.png", "small.png"}});
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\", \"image\": \"square.png\"}\n"
             "{\"prompt\": \"a red cube\", \"image\": \"cut.png\"}\n"
             "{\"prompt\": \"a red cube\"}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": \"wide.png\", \"seed\": 7}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": [\"wide.png\", \"cut.png\"], \"seed\": 7}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": [\"cut.png\", \"wide.png\"], \"seed\": 7}\n"
             "{\"prompt\": \"a blue sphere\", \"image\": [\"wide.png\"], \"seed\": 7}\n");
  const auto args = [&](const std::string& prompts, const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {dir.file(prompts), "--model", kData + "/pipelines/tiny-flux2-klein", "--out",
                                  dir.file(out), "--steps", "2", "--width", "32", "--height", "32"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  RunResult one = worker_generate(args("p.jsonl", "one", {}));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  RunResult batched = worker_generate(args("p.jsonl", "batched", {"--batch-size", "4"}));
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  RunResult ranks = run(two_rank_launch(DPINFER_WORKER_BINARY, free_port(), args("p.jsonl", "ranks", {"--batch-size", "2"})),
                        kEnv, 300s);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;
  const auto pixels = png_pixels(dir.file("one"));
  ASSERT_EQ(pixels.size(), 7u);
  EXPECT_EQ(png_pixels(dir.file("batched")), pixels);
  EXPECT_EQ(png_pixels(dir.file("ranks")), pixels);
  // The reference is what the image is made from: the same prompt and seed with another reference, or none,
  // is another image; a second reference changes it again, and so does their order. A list of one is the path.
  EXPECT_NE(pixels.at("000000.png"), pixels.at("000001.png"));
  EXPECT_NE(pixels.at("000000.png"), pixels.at("000002.png"));
  EXPECT_NE(pixels.at("000003.png"), pixels.at("000004.png"));
  EXPECT_NE(pixels.at("000004.png"), pixels.at("000005.png"));
  EXPECT_EQ(pixels.at("000003.png"), pixels.at("000006.png"));
  const auto rows = read_jsonl(dir.file("one/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 7u);
  int with_reference = 0;
  for (const auto& r : rows) {
    EXPECT_FALSE(r.contains("strength")) << r.dump();  // a reference has no strength
    EXPECT_EQ(r["width"], 32) << r.dump();             // the item's size is the output's
    with_reference += r.contains("input_image_hash");
  }
  EXPECT_EQ(with_reference, 6);
  // Several references are recorded as lists, in the line's order; one, as a path and a hash.
  std::map<int, nlohmann::json> by_index;
  for (const auto& r : rows) by_index[r["index"].get<int>()] = r;
  const nlohmann::json& two = by_index.at(4);
  ASSERT_TRUE(two["input_image_hash"].is_array()) << two.dump();
  ASSERT_EQ(two["input_image_hash"].size(), 2u);
  EXPECT_EQ(two["input_image_hash"][0], by_index.at(3)["input_image_hash"]);  // wide.png
  EXPECT_EQ(two["input_image_hash"][1], by_index.at(1)["input_image_hash"]);  // cut.png
  EXPECT_EQ(by_index.at(5)["input_image_hash"][0], two["input_image_hash"][1]);
  EXPECT_TRUE(contains(two["input_image"][1].get<std::string>(), "cut.png")) << two.dump();
  EXPECT_TRUE(by_index.at(6)["input_image_hash"].is_string()) << by_index.at(6).dump();
  const std::string infotext = read_png(dir.file("one/000004.png")).texts.at("parameters");
  EXPECT_TRUE(contains(infotext, "Input image hash: \"" + two["input_image_hash"][0].get<std::string>().substr(0, 10) +
                                     ", " + two["input_image_hash"][1].get<std::string>().substr(0, 10) + "\""))
      << infotext;
  // A rerun finds every item made, lists included.
  RunResult again = worker_generate(args("p.jsonl", "one", {}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out + again.err, "0 generated, 7 skipped")) << again.err;
  // --max-device-memory's plan counts each reference's tokens at FLUX.2's 1024^2 cap (two for the lines with two),
  // and says so in run.json.
  RunResult planned = worker_generate(args("p.jsonl", "planned", {"--max-device-memory", "20"}));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json plan = nlohmann::json::parse(read_file(dir.file("planned/run.json")))["memory_plan"];
  EXPECT_EQ(plan["shape"]["reference_pixels"], 2 * 1024 * 1024) << plan.dump();
  EXPECT_EQ(png_pixels(dir.file("planned")), pixels);

  // diffusers' check_image_input: a 37x23 reference is refused in one line naming the file; a strength too.
  write_file(dir.file("small.jsonl"), "{\"prompt\": \"x\", \"image\": \"small.png\"}\n");
  RunResult small = worker_generate(args("small.jsonl", "small", {}));
  EXPECT_NE(small.exit_code, 0);
  EXPECT_TRUE(contains(small.err, "small.png': the reference image is 37x23, and FLUX.2 takes references of at least 64 "
                                  "pixels a side")) << small.err;
  EXPECT_FALSE(contains(small.err, "terminate called")) << small.err;
  write_file(dir.file("strength.jsonl"), "{\"prompt\": \"x\", \"image\": \"square.png\", \"strength\": 0.5}\n");
  RunResult strength = worker_generate(args("strength.jsonl", "strength", {}));
  EXPECT_EQ(strength.exit_code, 2) << strength.err;
  EXPECT_TRUE(contains(strength.err, "which takes its image as a reference to edit and starts from noise")) << strength.err;
}

// FLUX.2's __call__ takes an unset height and width from the first reference (height = height or image_height):
// the worker sizes such an item by its reference's header, and the image is diffusers' own call without a size
// (make_flux2_reference_goldens.py's size_from_reference cases), whatever its batch; a side the line or the run sets
// stays set, and the memory plan counts an image as large as a reference may be.
TEST(Flux2ReferenceE2E, AnItemWithoutASizeTakesItsFirstReferences) {
  TempDir dir;
  copy_input_images(dir, {{"reference-0.png", "cut.png"}, {"reference-1.png", "wide.png"}});
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube on top of a blue sphere, studio lighting\", \"image\": \"cut.png\", \"seed\": 9}\n"
             "{\"prompt\": \"a photograph of an astronaut riding a horse\", \"image\": [\"wide.png\", \"cut.png\"], "
             "\"seed\": 10}\n"
             "{\"prompt\": \"a red cube on top of a blue sphere, studio lighting\", \"image\": \"cut.png\", \"seed\": 9, "
             "\"width\": 32}\n"
             "{\"prompt\": \"a red cube\"}\n");
  const auto args = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {dir.file("p.jsonl"), "--model", kData + "/pipelines/tiny-flux2-klein", "--out",
                                  dir.file(out), "--steps", "4"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  RunResult one = worker_generate(args("one", {}));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::string golden = kData + "/pipelines/tiny-flux2-klein.golden/reference/images.safetensors";
  expect_png_matches_golden(dir.file("one/000000.png"), golden, "fp32_size_from_reference");        // 64x68
  expect_png_matches_golden(dir.file("one/000001.png"), golden, "fp32_size_from_first_reference");  // 96x64
  std::map<int, nlohmann::json> rows;
  for (const auto& r : read_jsonl(dir.file("one/metadata.jsonl"))) rows[r["index"].get<int>()] = r;
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["width"], 64);
  EXPECT_EQ(rows[0]["height"], 68);
  EXPECT_EQ(rows[1]["width"], 96);
  EXPECT_EQ(rows[1]["height"], 64);
  EXPECT_EQ(rows[2]["width"], 32);  // the line's
  EXPECT_EQ(rows[2]["height"], 68);  // the reference's
  const DecodedPng text_only = read_png(dir.file("one/000003.png"));  // no reference: the model's default size
  EXPECT_EQ(rows[3]["width"], text_only.width);
  // One batch of all four (three sizes) makes the same images; a rerun finds them made.
  RunResult batched = worker_generate(args("batched", {"--batch-size", "4"}));
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  EXPECT_EQ(png_pixels(dir.file("batched")), png_pixels(dir.file("one")));
  RunResult again = worker_generate(args("one", {}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out + again.err, "0 generated, 4 skipped")) << again.err;
  // The run's size wins over the reference's.
  RunResult sized = worker_generate(args("sized", {"--width", "32", "--height", "32"}));
  ASSERT_EQ(sized.exit_code, 0) << sized.err;
  for (const auto& r : read_jsonl(dir.file("sized/metadata.jsonl"))) EXPECT_EQ(r["height"], 32) << r.dump();
  // The plan takes an image as large as FLUX.2's 1024^2 cap on a reference.
  RunResult planned = worker_generate(args("planned", {"--max-device-memory", "20"}));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json shape = nlohmann::json::parse(read_file(dir.file("planned/run.json")))["memory_plan"]["shape"];
  EXPECT_GE(shape["width"].get<int64_t>() * shape["height"].get<int64_t>(), 1024 * 1024) << shape.dump();
  EXPECT_EQ(png_pixels(dir.file("planned")), png_pixels(dir.file("one")));
}

// FLUX.1 Fill (tiny-flux-fill, FluxFillPipeline): PipelineParity holds its pixels to diffusers; here, the worker's side.
TEST(FluxFillE2E, EveryItemRepaintsItsMaskWithFillsDefaults) {
  TempDir dir;
  std::filesystem::copy_file(kData + "/input-images/img2img-0.png", dir.file("a.png"));
  std::filesystem::copy_file(kData + "/input-images/mask-0.png", dir.file("m.png"));
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red cube\", \"image\": \"a.png\", \"mask\": \"m.png\"}\n");
  const std::string model = kData + "/pipelines/tiny-flux-fill";
  RunResult ok = worker_generate({dir.file("p.jsonl"), "--model", model, "--out", dir.file("out"), "--steps", "3",
                                   "--width", "16", "--height", "16"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  // Under --offload model the VAE encodes the image and the masked image before the denoiser comes: the same pixels.
  RunResult offloaded = worker_generate({dir.file("p.jsonl"), "--model", model, "--out", dir.file("offloaded"), "--steps",
                                          "3", "--width", "16", "--height", "16", "--offload", "model"});
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  EXPECT_EQ(png_pixels(dir.file("offloaded")), png_pixels(dir.file("out")));
  const auto rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["guidance_scale"], 30.0);  // FluxFillPipeline's default
  EXPECT_EQ(rows[0]["strength"], 1.0);
  EXPECT_EQ(rows[0]["input_mask_hash"].get<std::string>().size(), 64u);
  // A line without its mask is refused before any weights load.
  write_file(dir.file("q.jsonl"), "{\"prompt\": \"a red cube\", \"image\": \"a.png\"}\n");
  RunResult bad = worker_generate({dir.file("q.jsonl"), "--model", model, "--out", dir.file("q")});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "q.jsonl' line 1: tiny-flux-fill is an inpainting model (FluxFillPipeline): every "
                                "item needs a 'mask'"))
      << bad.err;
}

// Qwen-Image img2img and inpainting through the worker (PipelineParity holds the pixels to diffusers): the records,
// and the same pixels under --offload model, which brings the VAE to the device to encode.
TEST(QwenImageImageItemsE2E, Img2ImgAndInpaintingWithAndWithoutOffload) {
  TempDir dir;
  std::filesystem::copy_file(kData + "/input-images/img2img-0.png", dir.file("a.png"));
  std::filesystem::copy_file(kData + "/input-images/mask-0.png", dir.file("m.png"));
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\", \"image\": \"a.png\", \"strength\": 0.7}\n"
             "{\"prompt\": \"a red cube\", \"image\": \"a.png\", \"mask\": \"m.png\"}\n");
  const auto qwen = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {dir.file("p.jsonl"), "--model", kData + "/pipelines/tiny-qwen-image", "--out",
                                  dir.file(out), "--steps", "4", "--width", "32", "--height", "32"};
    a.insert(a.end(), extra.begin(), extra.end());
    return worker_generate(a);
  };
  RunResult plain = qwen("plain", {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  RunResult offloaded = qwen("offloaded", {"--offload", "model"});
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  EXPECT_EQ(png_pixels(dir.file("offloaded")), png_pixels(dir.file("plain")));
  const auto rows = read_jsonl(dir.file("plain/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) EXPECT_EQ(r["input_image_hash"].get<std::string>().size(), 64u) << r.dump();
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

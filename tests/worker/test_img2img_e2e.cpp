// img2img end to end (issue 29): items that start from an image, through dpinfer-worker and the launcher, on the
// tiny SD 1.x pipeline. PipelineParity holds the pixels to diffusers' StableDiffusionImg2ImgPipeline; this checks
// what the worker adds around it: the path relative to the prompts file, the records and infotext, that an image
// depends neither on its batch nor on the world size, that resume compares the input's hash, and the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/image_compare.h"
#include "support/png_reader.h"
#include "support/run_outputs.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kModel = kData + "/pipelines/tiny-sd1";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

std::vector<std::string> args(const TempDir& dir, const std::string& prompts, const std::string& out,
                              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {dir.file(prompts), "--model", kModel, "--out", dir.file(out), "--steps", "4",
                                "--width", "64", "--height", "64"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

RunResult generate(const std::vector<std::string>& a) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate"};
  argv.insert(argv.end(), a.begin(), a.end());
  return run(argv, kEnv, 300s);
}

/// A folder with the prompts file and, beside it in images/, two inputs (one the pipelines resize).
void write_inputs(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("images"));
  std::filesystem::copy_file(kData + "/input-images/img2img-0.png", dir.file("images/a.png"));
  std::filesystem::copy_file(kData + "/input-images/img2img-1.png", dir.file("images/b.png"));
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\", \"image\": \"images/a.png\", \"strength\": 0.5}\n"
             "{\"prompt\": \"a green sphere\", \"image\": \"images/b.png\", \"strength\": 0.5}\n"
             "{\"prompt\": \"a blue cone\", \"image\": \"images/a.png\", \"strength\": 0.5, \"seed\": 7}\n"
             "{\"prompt\": \"text to image\"}\n");
}


// The batches are the plan's (plan/batches.h): at one --batch-size an image is bit for bit the same whatever the
// world size; another batch size may round a float32 matmul apart, within the parity bound.
TEST(Img2ImgE2E, ItemsStartFromTheirImagesWhateverTheirRanks) {
  TempDir dir;
  write_inputs(dir);
  RunResult one = generate(args(dir, "p.jsonl", "one"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  RunResult batched = generate(args(dir, "p.jsonl", "batched", {"--batch-size", "2"}));
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  RunResult ranks = run(two_rank_launch(DPINFER_WORKER_BINARY, free_port(), args(dir, "p.jsonl", "ranks", {"--batch-size", "2"})),
                        kEnv, 300s);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;
  const auto pixels = png_pixels(dir.file("one"));
  ASSERT_EQ(pixels.size(), 4u);
  EXPECT_EQ(png_pixels(dir.file("ranks")), png_pixels(dir.file("batched")));
  for (const auto& [name, bytes] : png_pixels(dir.file("batched")))
    expect_within_rounding(bytes, pixels.at(name), "batch of 2 vs alone: " + name);

  const auto rows = read_jsonl(dir.file("one/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  std::map<int, nlohmann::json> by_index;
  for (const auto& r : rows) by_index[r["index"].get<int>()] = r;
  // The path is resolved against the prompts file's folder; the hash is the file's SHA-256.
  EXPECT_EQ(by_index[0]["input_image"], std::filesystem::canonical(dir.file("images/a.png")).string());
  EXPECT_EQ(by_index[0]["input_image_hash"].get<std::string>().size(), 64u);
  EXPECT_EQ(by_index[0]["input_image_hash"], by_index[2]["input_image_hash"]);
  EXPECT_NE(by_index[0]["input_image_hash"], by_index[1]["input_image_hash"]);
  EXPECT_EQ(by_index[1]["strength"], 0.5);
  EXPECT_FALSE(by_index[3].contains("input_image"));
  EXPECT_FALSE(by_index[3].contains("strength"));
  const std::string infotext = read_png(dir.file("one/000000.png")).texts.at("parameters");
  EXPECT_TRUE(contains(infotext, "Denoising strength: 0.5, Input image hash: " +
                                     by_index[0]["input_image_hash"].get<std::string>().substr(0, 10)))
      << infotext;
  // The image is made from the input: another input, another image.
  EXPECT_NE(pixels.at("000000.png"), pixels.at("000001.png"));
}

TEST(Img2ImgE2E, ResumeComparesTheInputsHashAndStrength) {
  TempDir dir;
  write_inputs(dir);
  ASSERT_EQ(generate(args(dir, "p.jsonl", "out")).exit_code, 0);
  RunResult again = generate(args(dir, "p.jsonl", "out"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out + again.err, "0 generated, 4 skipped")) << again.err;
  // The same path, another picture: another item, refused in this --out.
  std::filesystem::copy_file(kData + "/input-images/img2img-2.png", dir.file("images/a.png"),
                             std::filesystem::copy_options::overwrite_existing);
  RunResult changed = generate(args(dir, "p.jsonl", "out"));
  EXPECT_EQ(changed.exit_code, 2) << changed.err;
  EXPECT_TRUE(contains(changed.err, "made with input_image_hash")) << changed.err;
  // And another strength for every image item (--strength does not override a line's own; a new file does).
  write_file(dir.file("q.jsonl"), "{\"prompt\": \"a green sphere\", \"image\": \"images/b.png\", \"strength\": 0.5}\n");
  ASSERT_EQ(generate(args(dir, "q.jsonl", "q")).exit_code, 0);
  write_file(dir.file("q.jsonl"), "{\"prompt\": \"a green sphere\", \"image\": \"images/b.png\", \"strength\": 0.75}\n");
  RunResult stronger = generate(args(dir, "q.jsonl", "q"));
  EXPECT_EQ(stronger.exit_code, 2) << stronger.err;
  EXPECT_TRUE(contains(stronger.err, "made with strength 0.5")) << stronger.err;
}

TEST(Img2ImgE2E, BadInputsAreOneLineEach) {
  TempDir dir;
  write_inputs(dir);
  const auto refused = [&](const std::string& jsonl, const std::vector<std::string>& extra, const std::string& what) {
    write_file(dir.file("bad.jsonl"), jsonl);
    RunResult r = generate(args(dir, "bad.jsonl", "bad", extra));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, what)) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad/000000.png")));
  };
  refused("{\"prompt\": \"x\", \"image\": \"images/missing.png\"}\n", {},
          "line 1: the input image 'images/missing.png' cannot be read (No such file or directory)");
  refused("{\"prompt\": \"x\", \"strength\": 0.5}\n", {}, "'strength' is for items that start from an image");
  refused("{\"prompt\": \"x\", \"image\": \"images/a.png\", \"strength\": 0}\n", {}, "'strength' must be a number in (0, 1]");
  refused("{\"prompt\": \"x\", \"image\": \"images/a.png\", \"strength\": 0.1}\n", {}, "runs no denoising step");
  refused("{\"prompt\": \"x\"}\n", {"--image", dir.file("images")}, "is a directory");
  {
    write_file(dir.file("t.txt"), "x\n");
    std::vector<std::string> a = {DPINFER_WORKER_BINARY, "generate", dir.file("t.txt"), "--model",
                                  kData + "/pipelines/tiny-flux2-klein", "--out", dir.file("q"), "--image",
                                  dir.file("images/a.png"), "--steps", "2", "--width", "32", "--height", "32"};
    // FLUX.2 [klein] has no img2img: its image is a reference to edit (issue 30), so --image runs and a
    // --strength is refused.
    RunResult r = run(a, kEnv, 300s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto rows = read_jsonl(dir.file("q/metadata.jsonl"));
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_TRUE(rows[0].contains("input_image_hash")) << rows[0].dump();
    EXPECT_FALSE(rows[0].contains("strength")) << rows[0].dump();
    a[6] = dir.file("q-strength");  // --out
    a.insert(a.end(), {"--strength", "0.5"});
    RunResult s = run(a, kEnv, 300s);
    EXPECT_EQ(s.exit_code, 2) << s.err;
    EXPECT_TRUE(contains(s.err, "which takes its image as a reference to edit and starts from noise")) << s.err;
  }
  // A file that is no image fails its own item; the others are made.
  write_file(dir.file("images/junk.png"), "not an image");
  write_file(dir.file("mixed.jsonl"),
             "{\"prompt\": \"x\", \"image\": \"images/junk.png\"}\n{\"prompt\": \"y\", \"image\": \"images/a.png\"}\n");
  RunResult mixed = generate(args(dir, "mixed.jsonl", "mixed", {"--batch-size", "2"}));
  const auto failures = read_jsonl(dir.file("mixed/failures.jsonl"));
  ASSERT_EQ(failures.size(), 1u) << mixed.err;
  EXPECT_TRUE(contains(failures[0]["error"].get<std::string>(), "not a PNG, JPEG or WebP image")) << failures[0];
  EXPECT_TRUE(std::filesystem::exists(dir.file("mixed/000001.png")));
}

// Inpainting: a mask beside the image. A text-to-image folder inpaints with its 4-channel UNet (blending the kept
// region back), an inpainting folder (9-channel UNet, StableDiffusionInpaintPipeline) needs a mask on every item.
TEST(Img2ImgE2E, MasksAreRecordedAndAnInpaintingModelNeedsThem) {
  TempDir dir;
  write_inputs(dir);
  std::filesystem::copy_file(kData + "/input-images/mask-0.png", dir.file("images/m.png"));
  write_file(dir.file("masked.jsonl"),
             "{\"prompt\": \"a red cube\", \"image\": \"images/a.png\", \"mask\": \"images/m.png\"}\n"
             "{\"prompt\": \"a red cube\", \"image\": \"images/a.png\"}\n");
  RunResult r = generate(args(dir, "masked.jsonl", "masked"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, nlohmann::json> rows;
  for (const auto& row : read_jsonl(dir.file("masked/metadata.jsonl"))) rows[row["index"].get<int>()] = row;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["input_mask_hash"].get<std::string>().size(), 64u);
  EXPECT_EQ(rows[0]["strength"], 1.0);  // StableDiffusionInpaintPipeline's default
  EXPECT_EQ(rows[1]["strength"], 0.8);  // StableDiffusionImg2ImgPipeline's
  EXPECT_FALSE(rows[1].contains("input_mask"));
  EXPECT_TRUE(contains(read_png(dir.file("masked/000000.png")).texts.at("parameters"), "Mask hash: ")) << r.err;
  EXPECT_NE(read_png(dir.file("masked/000000.png")).pixels, read_png(dir.file("masked/000001.png")).pixels);

  // The inpainting checkpoint: every line needs its image and mask.
  const auto inpaint = [&](const std::string& jsonl) {
    write_file(dir.file("i.jsonl"), jsonl);
    std::vector<std::string> a = {DPINFER_WORKER_BINARY, "generate", dir.file("i.jsonl"), "--model",
                                  kData + "/pipelines/tiny-sd1-inpaint", "--out", dir.file("inpaint"), "--steps", "3",
                                  "--width", "64", "--height", "64"};
    return run(a, kEnv, 300s);
  };
  RunResult ok = inpaint("{\"prompt\": \"x\", \"image\": \"images/a.png\", \"mask\": \"images/m.png\"}\n");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  RunResult no_mask = inpaint("{\"prompt\": \"x\", \"image\": \"images/b.png\"}\n");
  EXPECT_EQ(no_mask.exit_code, 2) << no_mask.err;
  EXPECT_TRUE(contains(no_mask.err, "is an inpainting model")) << no_mask.err;
  RunResult text_only = inpaint("{\"prompt\": \"y\"}\n");
  EXPECT_EQ(text_only.exit_code, 2) << text_only.err;
  // A mask needs an image.
  write_file(dir.file("m.jsonl"), "{\"prompt\": \"x\", \"mask\": \"images/m.png\"}\n");
  RunResult lone = generate(args(dir, "m.jsonl", "lone"));
  EXPECT_EQ(lone.exit_code, 2) << lone.err;
  EXPECT_TRUE(contains(lone.err, "'mask' is for items that start from an image")) << lone.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

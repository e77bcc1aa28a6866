// Single-file checkpoints through the commands a user runs: `dpinfer-worker generate` and
// `dpinfer launch` on tiny-sd1/tiny-sdxl in the LDM layout (tools/fixtures/make_single_file_fixtures.py)
// and on tiny-flux-dev's transformer in Black Forest Labs' layout (make_dit_single_file_fixtures.py)
// make the directory's images bit for bit, run.json says where each component came from,
// `dpinfer inspect` reports the file, and bad input exits 2 with one line.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "support/image_compare.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

RunResult generate(const TempDir& dir, const std::string& out, std::vector<std::string> model_args) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--steps", "3",
                                   "--width", "32", "--height", "32", "--out", dir.file(out)};
  argv.insert(argv.end(), model_args.begin(), model_args.end());
  return run(argv, kEnv, 300s);
}

void write_prompts(const TempDir& dir) {
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\", \"num_images\": 2}\n"
             "{\"prompt\": \"a blue sphere\", \"negative_prompt\": \"blurry\"}\n");
}


TEST(SingleFileE2E, Sd1FileMakesTheDirectorysImages) {
  TempDir dir;
  write_prompts(dir);
  const std::string file = kData + "/single_file/tiny-sd1.safetensors";
  RunResult a = generate(dir, "file", {"--model", file, "--base", kData + "/pipelines/tiny-sd1"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  RunResult b = generate(dir, "dir", {"--model", kData + "/pipelines/tiny-sd1"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto pixels = png_pixels_in(dir.file("file"));
  ASSERT_EQ(pixels.size(), 3u);
  EXPECT_EQ(pixels, png_pixels_in(dir.file("dir")));

  const json run_json = json::parse(read_file(dir.file("file/run.json")));
  const json& p = run_json["pipeline"];
  EXPECT_EQ(p["family"], "stable-diffusion");
  EXPECT_EQ(p["model"], "tiny-sd1");
  EXPECT_EQ(p["model_path"], file);
  EXPECT_EQ(p["single_file"]["kind"], "sd1");
  EXPECT_EQ(p["single_file"]["components"]["unet"], "single file (model.diffusion_model.*, LDM UNet)");
  EXPECT_EQ(p["single_file"]["components"]["vae"], "single file (first_stage_model.*, LDM VAE)");
  EXPECT_EQ(run_json["options"]["base"], kData + "/pipelines/tiny-sd1");
  EXPECT_TRUE(json::parse(read_file(dir.file("dir/run.json")))["pipeline"]["single_file"].is_null());
  // A1111's Model hash: the checkpoint file's SHA-256, not the base's UNet.
  const std::string meta = read_file(dir.file("file/metadata.jsonl"));
  EXPECT_EQ(json::parse(meta.substr(0, meta.find('\n')))["model_hash"], "daa0d0e785")
      << "sha256sum tests/data/single_file/tiny-sd1.safetensors";
}

TEST(SingleFileE2E, SdxlFileOnTwoRanksMakesTheDirectorysImages) {
  TempDir dir;
  write_prompts(dir);
  RunResult one = generate(dir, "dir", {"--model", kData + "/pipelines/tiny-sdxl"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  RunResult two = run({DPINFER_BINARY, "launch", "--nproc-per-node", "2", dir.file("p.jsonl"), "--model",
                       kData + "/single_file/tiny-sdxl.safetensors", "--base", kData + "/pipelines/tiny-sdxl",
                       "--steps", "3", "--width", "32", "--height", "32", "--out", dir.file("two")},
                      kEnv, 300s);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(png_pixels_in(dir.file("two")), png_pixels_in(dir.file("dir")));

  RunResult inspect = run({DPINFER_BINARY, "inspect", kData + "/single_file/tiny-sdxl.safetensors", "--base",
                           kData + "/pipelines/tiny-sdxl", "--json"},
                          kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["family"], "stable-diffusion-xl");
  EXPECT_EQ(report["single_file"]["kind"], "sdxl");
  EXPECT_EQ(report["components"]["text_encoder_2"]["source"],
            "single file (conditioner.embedders.1.model.*, OpenCLIP)");
}

TEST(SingleFileE2E, BadInputExitsTwoWithOneLine) {
  TempDir dir;
  write_prompts(dir);
  // A UNet-only file with the shipped SD 1.x default (found beside the binaries): no VAE.
  RunResult r = generate(dir, "a", {"--model", kData + "/single_file/tiny-sd1-unet-only.safetensors", "--base",
                                    std::string(DPINFER_TEST_DATA_DIR) + "/../../configs/single_file/sd1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "has no vae (no first_stage_model.* keys); give it with --vae DIR")) << r.err;
  // Not safetensors.
  write_file(dir.file("x.safetensors"), "garbage");
  r = generate(dir, "b", {"--model", dir.file("x.safetensors")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "is not a safetensors checkpoint")) << r.err;
  // A pickle.
  write_file(dir.file("m.ckpt"), "PK");
  r = generate(dir, "c", {"--model", dir.file("m.ckpt")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "is a pickle, which dpinfer never loads")) << r.err;
}

TEST(SingleFileE2E, FluxBflFileMakesTheDirectorysImages) {
  TempDir dir;
  write_prompts(dir);
  const std::string file = kData + "/single_file/tiny-flux-dev-bfl.safetensors";
  RunResult a = generate(dir, "file", {"--model", file, "--base", kData + "/pipelines/tiny-flux-dev"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  RunResult b = generate(dir, "dir", {"--model", kData + "/pipelines/tiny-flux-dev"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto pixels = png_pixels_in(dir.file("file"));
  ASSERT_EQ(pixels.size(), 3u);
  EXPECT_EQ(pixels, png_pixels_in(dir.file("dir")));
  const json p = json::parse(read_file(dir.file("file/run.json")))["pipeline"];
  EXPECT_EQ(p["model"], "tiny-flux-dev-bfl");
  EXPECT_EQ(p["single_file"]["kind"], "flux-dev");
  EXPECT_EQ(p["single_file"]["components"]["transformer"], "single file (*, BFL FLUX.1)");
  const std::string meta = read_file(dir.file("file/metadata.jsonl"));
  EXPECT_EQ(json::parse(meta.substr(0, meta.find('\n')))["model_hash"], "8e852a7e4d")
      << "sha256sum tests/data/single_file/tiny-flux-dev-bfl.safetensors";

  // ComfyUI's prefix, schnell: inspect reports the file and its keys as matching the base.
  RunResult inspect = run({DPINFER_BINARY, "inspect", kData + "/single_file/tiny-flux-schnell-comfy.safetensors",
                           "--base", kData + "/pipelines/tiny-flux-schnell", "--json"},
                          kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["single_file"]["kind"], "flux-schnell");
  EXPECT_EQ(report["components"]["transformer"]["source"], "single file (model.diffusion_model.*, BFL FLUX.1)");
  EXPECT_TRUE(report["components"]["transformer"]["keys"]["ok"].get<bool>());

  // Without --base: the shipped default has no VAE, text encoders or T5 vocabulary; exit 2, one line.
  RunResult r = generate(dir, "c", {"--model", file});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "is a FLUX.1 [dev] transformer only, without a vae; give it with --vae DIR")) << r.err;
}

// An SD3.5 file with its MMDiT, VAE, CLIP-G and T5 (CLIP-L from the base) makes the directory's images;
// inspect reports its kind; a Chroma file without --base is refused with one line, exit 2.
TEST(SingleFileE2E, Sd3FileMakesTheDirectorysImagesAndChromaNeedsABase) {
  TempDir dir;
  write_prompts(dir);
  const std::string file = kData + "/single_file/tiny-sd3.5-t5-incl-t5.safetensors";
  const std::string base = kData + "/pipelines/tiny-sd3.5-t5";
  RunResult a = generate(dir, "file", {"--model", file, "--base", base});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  RunResult b = generate(dir, "dir", {"--model", base});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto pixels = png_pixels_in(dir.file("file"));
  ASSERT_EQ(pixels.size(), 3u);
  EXPECT_EQ(pixels, png_pixels_in(dir.file("dir")));
  const json p = json::parse(read_file(dir.file("file/run.json")))["pipeline"];
  EXPECT_EQ(p["single_file"]["kind"], "sd3");
  EXPECT_EQ(p["single_file"]["components"]["text_encoder_3"],
            "single file (text_encoders.t5xxl.transformer.*, diffusers names)");
  const std::string meta = read_file(dir.file("file/metadata.jsonl"));
  EXPECT_EQ(json::parse(meta.substr(0, meta.find('\n')))["model_hash"], "404b3a519f")
      << "sha256sum tests/data/single_file/tiny-sd3.5-t5-incl-t5.safetensors";

  RunResult inspect = run({DPINFER_BINARY, "inspect", file, "--base", base, "--json"}, kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  EXPECT_EQ(report["single_file"]["kind"], "sd3");
  EXPECT_TRUE(report["components"]["transformer"]["keys"]["ok"].get<bool>());

  RunResult r = generate(dir, "c", {"--model", kData + "/single_file/tiny-chroma-bfl.safetensors"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "is a Chroma single file, which holds no tokenizers; pass --base DIR|org/name")) << r.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// --offload (issue 26 item 4) through `dpinfer generate`: runs with --offload model and --offload
// blocks:2 write the pixels of a run without offload, run.json records the choice, the log says once
// that offload on the CPU saves no memory, and resume takes images made under another offload (the
// pixels are the same, so it is no part of an image's identity). Bad values and a UNet asked for
// blocks are refused in one line with exit status 2.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/image_compare.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(OffloadE2e, OffloadedRunsWriteThePixelsOfARunWithoutAndResumeAcrossSettings) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\na lighthouse at dusk\na cat\n");
  write_file(dir.file("first.txt"), "a red cube\n");
  const auto generate = [&](const std::string& prompts, const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file(prompts), "--model",
                                     kPipelines + "tiny-flux-dev", "--steps", "2", "--width", "32", "--height", "32",
                                     "--out", dir.file(out)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 300s);
  };
  RunResult plain = generate("p.txt", "plain", {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err.find("--offload"), std::string::npos) << plain.err;
  const auto reference = png_pixels_in(dir.file("plain"));
  ASSERT_EQ(reference.size(), 3u);
  for (const std::string offload : {"model", "blocks:2"}) {
    const std::string out = "offload-" + offload.substr(0, 5);
    RunResult r = generate("p.txt", out, {"--offload", offload, "--encode-chunk", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(png_pixels_in(dir.file(out)), reference) << "--offload " << offload;
    EXPECT_EQ(count_of(r.err, "on the CPU the device is the host memory, so this saves no memory"), 1u) << r.err;
    const json run_json = json::parse(read_file(dir.file(out + "/run.json")));
    EXPECT_EQ(run_json["options"]["offload"], offload);
  }
  // Resume: the first image made without offload, the rest by a run with it, and the other way round.
  RunResult first = generate("first.txt", "mixed", {});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  RunResult rest = generate("p.txt", "mixed", {"--offload", "blocks"});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_NE(rest.err.find("skipped 1 item(s)"), std::string::npos) << rest.err;
  EXPECT_EQ(png_pixels_in(dir.file("mixed")), reference);
  RunResult again = generate("p.txt", "mixed", {"--offload", "model"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("skipped 3 item(s)"), std::string::npos) << again.err;
}

// img2img (and SD's UNet img2img, whose VAE encodes in float32): the VAE comes to the device to encode, the
// denoiser after it, the VAE again to decode; the pixels of the run without offload.
TEST(OffloadE2e, Img2imgMovesTheVaeTwiceAndKeepsThePixels) {
  TempDir dir;
  const std::string image = std::string(DPINFER_TEST_DATA_DIR) + "/input-images/img2img-0.png";
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red cube\", \"image\": \"" + image + "\", \"strength\": 0.6}\n"
                                  "{\"prompt\": \"a cat\"}\n");
  for (const std::string model : {"tiny-flux-dev", "tiny-sd1"}) {
    SCOPED_TRACE(model);
    const auto generate = [&](const std::string& out, const std::vector<std::string>& extra) {
      std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model",
                                       kPipelines + model, "--steps", "3", "--width", "32", "--height", "32",
                                       "--out", dir.file(model + "-" + out)};
      argv.insert(argv.end(), extra.begin(), extra.end());
      RunResult r = run(argv, kEnv, 300s);
      EXPECT_EQ(r.exit_code, 0) << r.err;
    };
    generate("plain", {});
    const auto reference = png_pixels_in(dir.file(model + "-plain"));
    ASSERT_EQ(reference.size(), 2u);
    generate("model", {"--offload", "model"});
    EXPECT_EQ(png_pixels_in(dir.file(model + "-model")), reference);
    if (model == "tiny-flux-dev") {
      generate("blocks", {"--offload", "blocks"});
      EXPECT_EQ(png_pixels_in(dir.file(model + "-blocks")), reference);
    }
  }
}

TEST(OffloadE2eBadInput, BadValuesAndBlocksOnAUNetAreRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  const auto generate = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--out", dir.file("out"),
                                     "--steps", "1", "--width", "32", "--height", "32"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 120s);
  };
  RunResult bad = generate({"--offload", "disk"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--offload: expected none, model, blocks or blocks:N, got 'disk'"), std::string::npos)
      << bad.err;
  RunResult zero = generate({"--offload", "blocks:0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--offload 'blocks:0': expected blocks:N with N a whole number of blocks a group"),
            std::string::npos)
      << zero.err;
  RunResult unet = generate({"--model", kPipelines + "tiny-sd1", "--offload", "blocks"});
  EXPECT_EQ(unet.exit_code, 2) << unet.err;
  EXPECT_NE(unet.err.find("--offload blocks: the unet has no transformer blocks to offload in groups; use --offload "
                          "model"),
            std::string::npos)
      << unet.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// --vae-tiling end to end (issue 26 item 5): it reaches the pipeline (the image is another one, as
// diffusers' vae.enable_tiling() makes it: PipelineParity holds the pixels to diffusers' tiled
// goldens), it is recorded in each image's record and in run.json, and resume compares it, as it
// compares --scheduler-set: a directory of untiled images refuses a tiled run, and the other way.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

// tiny-sd1 at 128 x 128: a 16 x 16 latent, 3 x 3 tiles of 8 for its VAE (sample_size 64).
RunResult generate(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model",
                                   kPipelines + "tiny-sd1", "--out", out, "--steps", "2", "--width", "128",
                                   "--height", "128"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv, kEnv, 300s);
}


TEST(VaeTilingE2E, TheFlagTilesTheDecodeIsRecordedAndResumeComparesIt) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  RunResult r = generate(dir, dir.file("plain"), {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = generate(dir, dir.file("tiled"), {"--vae-tiling"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_png(dir.file("tiled/000000.png")).pixels, read_png(dir.file("plain/000000.png")).pixels);

  const auto rows = read_jsonl(dir.file("tiled/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["vae_tiling"], true);
  EXPECT_FALSE(read_jsonl(dir.file("plain/metadata.jsonl"))[0].contains("vae_tiling"));
  const nlohmann::json run_json = nlohmann::json::parse(read_file(dir.file("tiled/run.json")));
  EXPECT_EQ(run_json["options"]["vae_tiling"], true);
  EXPECT_EQ(run_json["pipeline"]["vae_tiling"], true);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir.file("plain/run.json")))["pipeline"]["vae_tiling"], false);

  RunResult resume = generate(dir, dir.file("plain"), {"--vae-tiling"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with vae_tiling false")) << resume.err;
  resume = generate(dir, dir.file("tiled"), {});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with vae_tiling true")) << resume.err;
  EXPECT_EQ(generate(dir, dir.file("tiled"), {"--vae-tiling"}).exit_code, 0);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// --attention-backend and --channels-last end to end on the CPU (issue 28 item 3; the pixels are
// GpuLevers' in the torch tests): a backend the CPU lacks is refused in one line (exit 2) before any
// weight is read; a run with math attention and channels-last convolutions records both in every
// record and in run.json, and resume refuses to mix its images with those of a run without them; likewise
// --fp8-compute, which a UNet refuses.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kSd1 = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd1";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

RunResult generate(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra,
                   const std::string& model = kSd1) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", model, "--steps",
                                   "2", "--width", "16", "--height", "16", "--out", out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv, kEnv, 300s);
}

TEST(GpuLeversE2E, ABackendTheCpuLacksIsRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  for (const std::string backend : {"efficient", "cudnn"}) {
    RunResult r = generate(dir, dir.file("out"), {"--attention-backend", backend});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, "--attention-backend " + backend +
                                    " needs a CUDA device: on the CPU LibTorch has only the math and flash kernels"))
        << r.err;
    EXPECT_FALSE(contains(r.err, "Exception raised from")) << r.err;  // no LibTorch backtrace
  }
  RunResult bad = run({DPINFER_BINARY, "generate", dir.file("p.txt"), "--model", kSd1, "--attention-backend", "xformers",
                       "--out", dir.file("bad")},
                      kEnv, 60s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--attention-backend: expected auto, flash, efficient, cudnn or math, got 'xformers'"))
      << bad.err;
}

TEST(GpuLeversE2E, TheLeversAreRecordedAndResumeComparesThem) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  RunResult levers = generate(dir, dir.file("levers"), {"--attention-backend", "math", "--channels-last"});
  ASSERT_EQ(levers.exit_code, 0) << levers.err;
  const nlohmann::json record = read_jsonl(dir.file("levers/metadata.jsonl")).at(0);
  EXPECT_EQ(record["attention_backend"], "math") << record.dump();
  EXPECT_EQ(record["channels_last"], true) << record.dump();
  const nlohmann::json run_json = nlohmann::json::parse(read_file(dir.file("levers/run.json")));
  EXPECT_EQ(run_json["options"]["attention_backend"], "math");
  EXPECT_EQ(run_json["options"]["channels_last"], true);
  EXPECT_EQ(run_json["pipeline"]["attention_backend"], "math");
  EXPECT_EQ(run_json["pipeline"]["channels_last"], true);

  RunResult plain = generate(dir, dir.file("plain"), {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const nlohmann::json plain_record = read_jsonl(dir.file("plain/metadata.jsonl")).at(0);
  EXPECT_FALSE(plain_record.contains("attention_backend")) << plain_record.dump();  // auto: absent
  EXPECT_FALSE(plain_record.contains("channels_last")) << plain_record.dump();
  EXPECT_EQ(nlohmann::json::parse(read_file(dir.file("plain/run.json")))["pipeline"]["attention_backend"], "auto");

  // Resume compares each, both ways; the same levers resume.
  RunResult mixed = generate(dir, dir.file("plain"), {"--attention-backend", "math"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with attention_backend \"auto\"")) << mixed.err;
  mixed = generate(dir, dir.file("levers"), {"--attention-backend", "math"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with channels_last true")) << mixed.err;
  EXPECT_EQ(generate(dir, dir.file("levers"), {"--attention-backend", "math", "--channels-last"}).exit_code, 0);
}

// --fp8-compute: refused in one line for a UNet (exit 2, no image), recorded in every record, the infotext and
// run.json of a DiT run, and compared by resume.
TEST(GpuLeversE2E, Fp8ComputeIsRecordedAndResumeComparesIt) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  RunResult unet = generate(dir, dir.file("unet"), {"--fp8-compute", "tensorwise", "--dtype", "bf16"});
  EXPECT_EQ(unet.exit_code, 2) << unet.err;
  EXPECT_TRUE(contains(unet.err, "--fp8-compute tensorwise: the unet has no transformer blocks (a UNet)")) << unet.err;
  EXPECT_FALSE(contains(unet.err, "Exception raised from")) << unet.err;

  const std::string flux = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-flux-dev";
  const auto flux_run = [&](const std::string& out, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--dtype", "bf16"});
    return generate(dir, out, extra, flux);
  };
  RunResult fp8 = flux_run(dir.file("fp8"), {"--fp8-compute", "tensorwise"});
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  const nlohmann::json record = read_jsonl(dir.file("fp8/metadata.jsonl")).at(0);
  EXPECT_EQ(record["fp8_compute"], "tensorwise") << record.dump();
  const nlohmann::json run_json = nlohmann::json::parse(read_file(dir.file("fp8/run.json")));
  EXPECT_EQ(run_json["options"]["fp8_compute"], "tensorwise");
  EXPECT_EQ(run_json["pipeline"]["fp8_compute"], "tensorwise");
  EXPECT_TRUE(contains(read_png(dir.file("fp8/000000.png")).texts.at("parameters"), "FP8 compute: tensorwise"));

  RunResult plain = flux_run(dir.file("plain"), {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(read_jsonl(dir.file("plain/metadata.jsonl")).at(0).contains("fp8_compute"));
  EXPECT_NE(read_file(dir.file("fp8/000000.png")), read_file(dir.file("plain/000000.png")));

  RunResult mixed = flux_run(dir.file("plain"), {"--fp8-compute", "tensorwise"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with fp8_compute \"off\"")) << mixed.err;
  EXPECT_EQ(flux_run(dir.file("fp8"), {"--fp8-compute", "tensorwise"}).exit_code, 0);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

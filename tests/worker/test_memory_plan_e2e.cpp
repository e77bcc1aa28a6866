// --max-device-memory (issue 26 item 6) through `dpinfer generate` on the CPU, where the budget caps the
// run's CPU allocations: run.json records the plan, the estimate and the measured peak (within the budget);
// a budget between the resident and the two-phase estimates that `dpinfer inspect --memory` prints makes the
// run two-phase with the pixels of a run without a plan; a budget nothing fits is refused at the start with
// exit 4 and no image, --exact refuses a budget only fp8 storage would meet, and without --exact the run takes
// fp8 storage and records it in each image; bad values exit 2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

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

/// The peak column (bytes) of `row`'s line in inspect --memory's plan table ("12.3 MB" or "1.20 GB").
double plan_peak(const std::string& table, const std::string& row) {
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t at = line.find("  " + row + " ");
    if (at != 0) continue;
    const std::string rest = line.substr(2 + row.size());
    const bool is_row_itself = rest.find_first_not_of(' ') != std::string::npos &&
                               std::isdigit(static_cast<unsigned char>(rest[rest.find_first_not_of(' ')]));
    if (!is_row_itself) continue;
    const size_t unit = line.rfind(' ');
    const size_t number = line.rfind(' ', unit - 1);
    const double value = std::atof(line.substr(number + 1, unit - number - 1).c_str());
    return value * (line.substr(unit + 1) == "GB" ? 1e9 : 1e6);
  }
  ADD_FAILURE() << "no row '" << row << "' in:\n" << table;
  return 0;
}

class MemoryPlanE2E : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir.file("p.txt"), "a red cube\na lighthouse at dusk\n"); }
  RunResult generate(const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model",
                                     kPipelines + "tiny-sd1", "--steps", "2", "--width", "64", "--height", "64",
                                     "--out", dir.file(out)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, kEnv, 300s);
  }
  TempDir dir;
};

TEST_F(MemoryPlanE2E, RecordsThePlanAndAMeasuredPeakWithinTheBudget) {
  RunResult r = generate("out", {"--max-device-memory", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("memory plan for cpu at 64x64, batch 1: everything resident; estimated peak "), std::string::npos)
      << r.err;
  const json plan = json::parse(read_file(dir.file("out/run.json")))["memory_plan"];
  EXPECT_EQ(plan["budget_bytes"], 2'000'000'000);
  EXPECT_EQ(plan["levers"]["weight_storage"], "default");
  EXPECT_EQ(plan["shape"]["width"], 64);
  const int64_t measured = plan["measured_peak_bytes"].get<int64_t>();
  EXPECT_GT(measured, 0);
  EXPECT_LE(measured, 2'000'000'000);
  for (const char* phase : {"load", "encode", "denoise", "decode"})
    EXPECT_GT(plan["measured_peak_bytes_by_phase"].value(phase, int64_t{0}), 0) << phase << ": " << plan.dump();
  EXPECT_EQ(png_pixels_in(dir.file("out")).size(), 2u);
}

// The plan counts the largest LoRA set (here a line's two LoRAs, more than --lora's one): on the CPU its factors
// and the originals of the weights it touches, which the measured peak holds too.
TEST_F(MemoryPlanE2E, CountsTheLargestLoraSet) {
  const std::string loras = std::string(DPINFER_TEST_DATA_DIR) + "/loras/";
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red cube\"}\n{\"prompt\": \"a lighthouse\", \"loras\": [\"" + loras +
                                      "sd1-kohya.safetensors\", \"" + loras + "sd1-locon.safetensors:-0.5\"]}\n");
  const auto planned = [&](const std::string& out, const std::string& prompts) {
    RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file(prompts), "--model", kPipelines + "tiny-sd1", "--steps",
                       "2", "--width", "64", "--height", "64", "--out", dir.file(out), "--max-device-memory", "2",
                       "--lora", loras + "sd1-peft.safetensors"},
                      kEnv, 300s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(", LoRAs of up to "), std::string::npos) << r.err;
    return json::parse(read_file(dir.file(out + "/run.json")))["memory_plan"];
  };
  const json one = planned("one", "p.txt"), two = planned("two", "p.jsonl");
  EXPECT_GT(one["shape"]["lora_touched_elements"].get<int64_t>(), 0) << one.dump();
  EXPECT_GT(two["shape"]["lora_factor_elements"], one["shape"]["lora_factor_elements"]) << two.dump();
  EXPECT_GT(two["shape"]["lora_touched_elements"], one["shape"]["lora_touched_elements"]) << two.dump();
  EXPECT_GT(two["peak_bytes"], one["peak_bytes"]);
  EXPECT_LE(two["measured_peak_bytes"].get<int64_t>(), 2'000'000'000);
}

TEST_F(MemoryPlanE2E, ABudgetOnlyTwoPhaseMeetsMakesTheRunTwoPhaseWithTheSamePixels) {
  RunResult inspect = run({DPINFER_WORKER_BINARY, "inspect", kPipelines + "tiny-sd1", "--memory", "--dtype", "fp32",
                           "--device", "cpu", "--width", "64", "--height", "64"},
                          kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const double resident = plan_peak(inspect.out, "everything resident");
  const double two_phase = plan_peak(inspect.out, "two-phase encoding in chunks of 1 items");
  ASSERT_LT(two_phase, resident) << inspect.out;
  const double budget_gb = (two_phase + resident) / 2 / 1e9;
  RunResult plain = generate("plain", {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  RunResult planned = generate("planned", {"--max-device-memory", std::to_string(budget_gb)});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.err.find(": two-phase encoding in chunks of 1 items; estimated peak"), std::string::npos)
      << planned.err;
  EXPECT_NE(planned.err.find("(--max-device-memory's plan): the text encoders and the denoiser take the device in turn"),
            std::string::npos)
      << planned.err;
  EXPECT_EQ(png_pixels_in(dir.file("planned")), png_pixels_in(dir.file("plain")));
  const json plan = json::parse(read_file(dir.file("planned/run.json")))["memory_plan"];
  EXPECT_EQ(plan["levers"]["two_phase"], true);
  EXPECT_LE(plan["measured_peak_bytes"].get<double>(), budget_gb * 1e9);
}

TEST_F(MemoryPlanE2E, ARunThatCannotFitIsRefusedAtTheStart) {
  RunResult r = generate("tiny", {"--max-device-memory", "0.001"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("error: --max-device-memory 1.0 MB: the run does not fit; the smallest plan, "), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("\n", r.err.find("error: ")), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_TRUE(png_pixels_in(dir.file("tiny")).empty());

  // --exact: a budget that only fp8 storage meets (of the denoiser: the first storage in the order of cost).
  RunResult inspect = run({DPINFER_WORKER_BINARY, "inspect", kPipelines + "tiny-sd1", "--memory", "--dtype", "fp32",
                           "--device", "cpu", "--width", "64", "--height", "64"},
                          kEnv, 120s);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const double exact = plan_peak(inspect.out, "two-phase encoding in chunks of 1 items");
  const double fp8 = plan_peak(inspect.out, "two-phase encoding in chunks of 1 items, --weight-storage fp8-denoiser *");
  ASSERT_LT(fp8, exact) << inspect.out;
  const std::string budget = std::to_string((fp8 + exact) / 2 / 1e9);
  RunResult refused = generate("exact", {"--max-device-memory", budget, "--exact"});
  EXPECT_EQ(refused.exit_code, 4) << refused.err;
  EXPECT_NE(refused.err.find("without --exact, two-phase encoding in chunks of 1 items, --weight-storage fp8-denoiser would fit"),
            std::string::npos)
      << refused.err;
  RunResult allowed = generate("fp8", {"--max-device-memory", budget});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  const json record = json::parse(read_file(dir.file("fp8/metadata.jsonl")).substr(0, read_file(dir.file("fp8/metadata.jsonl")).find('\n')));
  EXPECT_EQ(record["weight_storage"], "fp8-denoiser") << record.dump();
}

TEST_F(MemoryPlanE2E, BadValuesAreRefusedInOneLine) {
  RunResult bad = generate("bad", {"--max-device-memory", "lots"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--max-device-memory 'lots': expected a number of GB above 0 (e.g. 22.5) or auto"),
            std::string::npos)
      << bad.err;
  RunResult exact = generate("bad", {"--exact"});
  EXPECT_EQ(exact.exit_code, 2);
  EXPECT_NE(exact.err.find("--exact: it says what --max-device-memory's plan may choose"), std::string::npos)
      << exact.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

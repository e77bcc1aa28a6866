// Job arrays as outer shards, end to end with the fake pipeline: each task takes
// its shard from SLURM_ARRAY_TASK_*, empty shards succeed, and `dpinfer status` /
// `dpinfer merge` see the whole run (README, "Job arrays and --shard").
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kWorker = DPINFER_TEST_WORKER;

std::map<std::string, std::string> array_task(int id, int min, int max, int step, int count) {
  return {{"CUDA_VISIBLE_DEVICES", ""},
          {"SLURM_JOB_ID", "900"},
          {"SLURM_ARRAY_JOB_ID", "900"},
          {"SLURM_ARRAY_TASK_ID", std::to_string(id)},
          {"SLURM_ARRAY_TASK_MIN", std::to_string(min)},
          {"SLURM_ARRAY_TASK_MAX", std::to_string(max)},
          {"SLURM_ARRAY_TASK_STEP", std::to_string(step)},
          {"SLURM_ARRAY_TASK_COUNT", std::to_string(count)}};
}


// --array=0-4:2 (tasks 0, 2, 4) over 2 prompts: shard 2/3 is empty and succeeds.
TEST(JobArrays, TasksTakeDenseShardsAndAnEmptyShardSucceeds) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red fox\na blue bird\n");
  const std::string out = dir.file("out");
  for (int id : {0, 2, 4}) {
    RunResult r = run({kWorker, "generate", dir.file("p.txt"), "--out", out}, array_task(id, 0, 4, 2, 3), 120s);
    ASSERT_EQ(r.exit_code, 0) << "task " << id << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "outer shard " + std::to_string(id / 2) + "/3 from SLURM_ARRAY_TASK_ID=" +
                                    std::to_string(id)))
        << r.err;
    const std::string manifest = out + "/manifest.shard" + std::to_string(id / 2) + "-of-3.rank0.jsonl";
    ASSERT_TRUE(fs::exists(manifest)) << manifest;
    EXPECT_EQ(read_jsonl(manifest).size(), id == 4 ? 0u : 1u);
    nlohmann::json run_json = nlohmann::json::parse(read_file(out + "/run.json"));
    EXPECT_EQ(run_json["shard"]["index"], id / 2);
    EXPECT_EQ(run_json["items_in_shard"], id == 4 ? 0 : 1);
    EXPECT_EQ(run_json["summary"]["generated"], id == 4 ? 0 : 1);
  }
  EXPECT_TRUE(fs::exists(out + "/000000.png"));
  EXPECT_TRUE(fs::exists(out + "/000001.png"));

  RunResult st = run({dpinfer_binary(), "status", out, "--prompts", dir.file("p.txt")});
  EXPECT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(st.out,
            "shard 0/3: 1/1 done, 0 failed\nshard 1/3: 1/1 done, 0 failed\nshard 2/3: 0/0 done, 0 failed\n"
            "total: 2/2 done, 0 failed, 0 missing\n");
  fs::remove(out + "/metadata.jsonl");
  RunResult m = run({dpinfer_binary(), "merge", out});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  auto rows = read_jsonl(out + "/metadata.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["prompt"], "a red fox");
  EXPECT_EQ(rows[1]["prompt"], "a blue bird");
}

// Each array task may itself be a multi-rank group: shard first, then ranks.
TEST(JobArrays, ArrayTasksUnderTheLauncherCoverEveryItemOnce) {
  TempDir dir;
  std::string prompts;
  for (int i = 0; i < 11; ++i) prompts += "prompt " + std::to_string(i) + "\n";
  write_file(dir.file("p.txt"), prompts);
  const std::string out = dir.file("out");
  for (int id = 1; id <= 3; ++id) {  // --array=1-3
    RunResult r = run({dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate", dir.file("p.txt"),
                       "--out", out},
                      array_task(id, 1, 3, 1, 3), 120s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::map<int, int> seen;
  for (const auto& e : fs::directory_iterator(out)) {
    std::string name = e.path().filename().string();
    if (name.rfind("manifest.shard", 0) == 0)
      for (const auto& rec : read_jsonl(e.path().string())) ++seen[rec["index"].get<int>()];
  }
  ASSERT_EQ(seen.size(), 11u);
  for (const auto& [index, n] : seen) EXPECT_EQ(n, 1) << "item " << index;
  RunResult st = run({dpinfer_binary(), "status", out, "--prompts", dir.file("p.txt"), "--json"});
  EXPECT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(nlohmann::json::parse(st.out)["done"], 11);
}

TEST(JobArrays, AnIrregularArrayFailsAndAnExplicitShardWins) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a\nb\nc\n");
  auto env = array_task(4, 1, 9, 1, 3);  // --array=1,4,9
  RunResult r = run({kWorker, "generate", dir.file("p.txt"), "--out", dir.file("out")}, env, 120s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "not a plain range")) << r.err;
  EXPECT_TRUE(contains(r.err, "--shard I/N")) << r.err;
  // One error line (other lines, e.g. the SLURM job's description, may precede it).
  size_t at = r.err.find("error: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("error: ", at + 1), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--shard I/N", at), std::string::npos) << r.err;
  r = run({kWorker, "generate", dir.file("p.txt"), "--out", dir.file("out"), "--shard", "1/3"}, env, 120s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "outer shard 1/3 from --shard 1/3")) << r.err;
  EXPECT_TRUE(fs::exists(dir.file("out/manifest.shard1-of-3.rank0.jsonl")));
  EXPECT_TRUE(fs::exists(dir.file("out/000001.png")));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

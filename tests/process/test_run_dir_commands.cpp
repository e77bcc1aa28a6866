// `dpinfer merge` and `dpinfer status` as real processes over real files (README,
// "Merging and checking a run"): exit statuses, messages, and the files written.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string png_name(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06d.png", index);
  return buf;
}

std::string record(int index, const std::string& status, double t, const std::string& prompt = "") {
  nlohmann::json j = {{"index", index}, {"prompt", prompt.empty() ? "prompt " + std::to_string(index) : prompt},
                      {"seed", index}, {"status", status}, {"finished_at", t}};
  if (status == "ok") j["file_name"] = png_name(index);
  else j["error"] = "boom";
  return j.dump() + "\n";
}

/// A sharded run's output directory: `n` prompts in 3 shards, shard 1 with a failure.
void three_shard_run(const TempDir& dir, int n, bool shard2_ran) {
  std::string prompts;
  for (int i = 0; i < n; ++i) prompts += "prompt " + std::to_string(i) + "\n";
  write_file(dir.file("p.txt"), prompts);
  fs::create_directories(dir.file("out"));
  // n = 10: shards [0,4) [4,7) [7,10)
  const int bounds[] = {0, 4, 7, 10};
  for (int s = 0; s < 3; ++s) {
    if (s == 2 && !shard2_ran) continue;
    std::string m;
    for (int i = bounds[s]; i < bounds[s + 1]; ++i) {
      bool fail = s == 1 && i == 5;
      if (!fail) write_file(dir.file("out/" + png_name(i)), "png");
      m += record(i, fail ? "error" : "ok", 100 + i);
    }
    write_file(dir.file("out/manifest.shard" + std::to_string(s) + "-of-3.rank0.jsonl"), m);
  }
}


TEST(MergeCommand, MergesEveryShardsManifestsInIndexOrder) {
  TempDir dir;
  three_shard_run(dir, 10, true);
  RunResult r = run({dpinfer_binary(), "merge", dir.file("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "merged 3 manifest(s): 9 row(s) in")) << r.err;
  auto rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 9u);
  for (size_t k = 1; k < rows.size(); ++k) EXPECT_LT(rows[k - 1]["index"], rows[k]["index"]);
  EXPECT_FALSE(rows[0].contains("finished_at"));
  auto failures = read_jsonl(dir.file("out/failures.jsonl"));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0]["index"], 5);
  // No temporaries left behind (atomic writes).
  for (const auto& e : fs::directory_iterator(dir.file("out")))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(MergeCommand, DuplicatesWarnAndConflictsRefuse) {
  TempDir dir;
  three_shard_run(dir, 10, true);
  // A rerun with 2 shards regenerated items 0..4 the same way: duplicates, no conflict.
  std::string m;
  for (int i = 0; i < 5; ++i) m += record(i, "ok", 200 + i);
  write_file(dir.file("out/manifest.shard0-of-2.rank0.jsonl"), m);
  RunResult r = run({dpinfer_binary(), "merge", dir.file("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "warning: 5 item(s) were generated more than once")) << r.err;
  EXPECT_EQ(read_jsonl(dir.file("out/metadata.jsonl")).size(), 9u);
  // Another prompts file in the same directory: a conflict, nothing written.
  write_file(dir.file("out/manifest.shard1-of-2.rank0.jsonl"), record(6, "ok", 300, "a different prompt"));
  fs::remove(dir.file("out/metadata.jsonl"));
  r = run({dpinfer_binary(), "merge", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "error: '" + dir.file("out") +
                                  "': item 6 has prompt \"a different prompt\" in manifest.shard1-of-2.rank0.jsonl but "
                                  "\"prompt 6\" in manifest.shard1-of-3.rank0.jsonl"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "--latest-wins")) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out/metadata.jsonl")));
  r = run({dpinfer_binary(), "merge", dir.file("out"), "--latest-wins"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "conflicting records")) << r.err;
}

TEST(MergeCommand, BadInputIsOneLineAndStatusTwo) {
  TempDir dir;
  RunResult r = run({dpinfer_binary(), "merge", dir.file("nope")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "is not a directory")) << r.err;
  r = run({dpinfer_binary(), "merge", dir.path()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "holds no manifest*.jsonl")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run({dpinfer_binary(), "merge"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(StatusCommand, PerShardLinesAndExitStatus) {
  TempDir dir;
  three_shard_run(dir, 10, false);
  RunResult r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt")});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out,
            "shard 0/3: 4/4 done, 0 failed\n"
            "shard 1/3: 2/3 done, 1 failed\n"
            "shard 2/3: 0/3 done, 0 failed (not started: no manifest)\n"
            "total: 6/10 done, 1 failed, 3 missing\n");
  // Generate's own options shape the scope: --shard 0/3 is complete.
  r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt"), "--shard", "0/3", "--seed",
           "5"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "shard 0/3: 4/4 done, 0 failed\ntotal: 4/4 done, 0 failed, 0 missing\n");
  r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt"), "--json"});
  EXPECT_EQ(r.exit_code, 3);
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["done"], 6);
  EXPECT_EQ(j["missing"], 3);
  EXPECT_EQ(j["shards"].size(), 3u);
  EXPECT_EQ(j["complete"], false);
}

TEST(StatusCommand, CompleteRunExitsZero) {
  TempDir dir;
  three_shard_run(dir, 10, true);
  write_file(dir.file("out/" + png_name(5)), "png");
  write_file(dir.file("out/manifest.shard1-of-3.rank1.jsonl"), record(5, "ok", 500));  // the retry
  RunResult r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "total: 10/10 done, 0 failed, 0 missing\n")) << r.out;
}

// Without --prompts, the file run.json names (an absolute path, so any working directory
// does), and run.json's --num-images unless one is given.
TEST(StatusCommand, WithoutPromptsTheRunsOwnFileAndNumImagesFromRunJson) {
  TempDir dir;
  three_shard_run(dir, 10, true);
  write_file(dir.file("out/run.json"), nlohmann::json({{"prompts_path", dir.file("p.txt")},
                                                       {"options", {{"num_images", 1}}}}).dump());
  RunResult r = run({dpinfer_binary(), "status", dir.file("out")});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.out, "total: 9/10 done, 1 failed, 0 missing\n")) << r.out;
  // Five lines of two images each are the same ten items (prompts aside: the records
  // name "prompt I", so the count is all that is checked here).
  write_file(dir.file("p.txt"), "prompt 0\nprompt 2\nprompt 4\nprompt 6\nprompt 8\n");
  write_file(dir.file("out/run.json"), nlohmann::json({{"prompts_path", dir.file("p.txt")},
                                                       {"options", {{"num_images", 2}}}}).dump());
  r = run({dpinfer_binary(), "status", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2) << r.err;  // item 1 is "prompt 1" in the records, "prompt 0" here
  EXPECT_TRUE(contains(r.err, "or with another --num-images than 2 (its run.json's)?")) << r.err;
  r = run({dpinfer_binary(), "status", dir.file("out"), "--num-images", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "or with another --num-images than 1?")) << r.err;
  // A run that read stdin names no file; a file that is gone is said so.
  write_file(dir.file("out/run.json"), "{\"options\": {}}");
  r = run({dpinfer_binary(), "status", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "run.json' names no prompts file (the run read stdin); give --prompts FILE")) << r.err;
  write_file(dir.file("out/run.json"), nlohmann::json({{"prompts_path", dir.file("gone.txt")}}).dump());
  r = run({dpinfer_binary(), "status", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "names the prompts file '" + dir.file("gone.txt") + "', which is not there any more"))
      << r.err;
}

TEST(StatusCommand, BadInputNamesTheProblem) {
  TempDir dir;
  three_shard_run(dir, 10, true);
  write_file(dir.file("other.txt"), "x\ny\n");
  RunResult r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("other.txt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "records item 0 with prompt \"prompt 0\" but the prompts file's line 1 gives \"x\"")) << r.err;
  EXPECT_TRUE(contains(r.err, "another prompts file")) << r.err;
  r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("missing.txt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "cannot read prompts file")) << r.err;
  r = run({dpinfer_binary(), "status", dir.file("out")});  // no run.json to name the file
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "holds no readable run.json to name the prompts file (has a rank started?); give "
                              "--prompts FILE"))
      << r.err;
  r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt"), "--shard", "3/3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--shard")) << r.err;
  r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt"), "--out", "x"});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// What `dpinfer merge` and `dpinfer status` call a conflict (io::read_manifests):
// each manifest's latest record of an item against the other manifests' latest,
// never a record its own manifest superseded. Unit level over real files, then the
// README's reproduction through the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "dpinfer/io/manifest.h"
#include "dpinfer/plan/run_status.h"
#include "support/imagefolder.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// plan::run_status() of a run at --batch-size 1 (one item a batch: shards cut by items).
plan::RunStatus status_of(const plan::ItemList& items, const io::ManifestSet& set,
                          const std::optional<plan::OuterShard>& only = std::nullopt) {
  return plan::run_status(items, plan::BatchPlan(items.specs(), items.defaults().num_images, 1), set, only);
}

/// An "ok" record of item `index` (prompt "p<index>") with `seed`, and its PNG.
std::string ok(const TempDir& dir, int index, int seed, double t) {
  write_file(dir.file(plan::item_file_name(index)), "png");
  nlohmann::json j = {{"index", index},   {"prompt", "p" + std::to_string(index)},
                      {"seed", seed},     {"status", "ok"},
                      {"finished_at", t}, {"file_name", plan::item_file_name(index)}};
  return j.dump() + "\n";
}


// generate --out X; generate --out X --overwrite --seed 7; rm X/000000.png;
// generate --out X --seed 7 --shard 0/1: every manifest's latest record of item 0
// has seed 7, so nothing conflicts (the first record seen, seed 0, was superseded).
TEST(ManifestConflicts, ASupersededRecordInTheSameManifestIsNotAConflict) {
  TempDir dir;
  write_file(dir.file("manifest.rank0.jsonl"), ok(dir, 0, 0, 1) + ok(dir, 1, 1, 1) + ok(dir, 0, 7, 2) + ok(dir, 1, 7, 2));
  write_file(dir.file("manifest.shard0-of-1.rank0.jsonl"), ok(dir, 0, 7, 3));
  io::ManifestSet set = io::read_manifests(dir.path());
  EXPECT_TRUE(set.conflicts.empty()) << set.conflicts.front().describe();
  EXPECT_EQ(set.items[0].manifest, "manifest.shard0-of-1.rank0.jsonl");
  EXPECT_EQ(set.items[0].record["seed"], 7);
  EXPECT_EQ(set.duplicates, 1u);  // item 0 has an ok record in both manifests
  // The same when the later manifest is the one with a superseded record.
  TempDir dir2;
  write_file(dir2.file("manifest.rank0.jsonl"), ok(dir2, 0, 7, 2));
  write_file(dir2.file("manifest.shard0-of-1.rank0.jsonl"), ok(dir2, 0, 9, 1) + ok(dir2, 0, 7, 3));
  EXPECT_TRUE(io::read_manifests(dir2.path()).conflicts.empty());
}

TEST(ManifestConflicts, LatestRecordsThatDisagreeStillConflictAndNameTheLatestValues) {
  TempDir dir;
  // rank0's latest is seed 7 (its seed 0 is superseded); the shard's latest is seed 8.
  write_file(dir.file("manifest.rank0.jsonl"), ok(dir, 0, 0, 1) + ok(dir, 0, 7, 2));
  write_file(dir.file("manifest.shard0-of-1.rank0.jsonl"), ok(dir, 0, 8, 3));
  io::ManifestSet set = io::read_manifests(dir.path());
  ASSERT_EQ(set.conflicts.size(), 1u);
  EXPECT_EQ(set.conflicts[0].describe(),
            "item 0 has seed 7 in manifest.rank0.jsonl but 8 in manifest.shard0-of-1.rank0.jsonl");
  // The latest record still decides what --latest-wins keeps.
  EXPECT_EQ(set.items[0].record["seed"], 8);
}

// --scheduler-set keys are part of what an item is; a record without them had none.
TEST(ManifestConflicts, SchedulerSettingsConflictAndTheirAbsenceIsNone) {
  TempDir dir;
  nlohmann::json set = nlohmann::json::parse(ok(dir, 0, 0, 2));
  set["scheduler_settings"] = {{"timestep_spacing", "trailing"}};
  write_file(dir.file("manifest.rank0.jsonl"), ok(dir, 0, 0, 1));
  write_file(dir.file("manifest.rank1.jsonl"), set.dump() + "\n");
  io::ManifestSet manifests = io::read_manifests(dir.path());
  ASSERT_EQ(manifests.conflicts.size(), 1u);
  EXPECT_EQ(manifests.conflicts[0].describe(),
            "item 0 has scheduler_settings {} in manifest.rank0.jsonl but {\"timestep_spacing\":\"trailing\"} in "
            "manifest.rank1.jsonl");
  set["scheduler_settings"] = nlohmann::json::object();  // written by no run, but the same as none
  write_file(dir.file("manifest.rank1.jsonl"), set.dump() + "\n");
  EXPECT_TRUE(io::read_manifests(dir.path()).conflicts.empty());
}

// --vae-tiling changes pixels (the tiles' blend): part of what an item is; a record without it was
// decoded whole.
TEST(ManifestConflicts, VaeTilingConflictsAndItsAbsenceIsOff) {
  TempDir dir;
  nlohmann::json tiled = nlohmann::json::parse(ok(dir, 0, 0, 2));
  tiled["vae_tiling"] = true;
  write_file(dir.file("manifest.rank0.jsonl"), ok(dir, 0, 0, 1));
  write_file(dir.file("manifest.rank1.jsonl"), tiled.dump() + "\n");
  io::ManifestSet manifests = io::read_manifests(dir.path());
  ASSERT_EQ(manifests.conflicts.size(), 1u);
  EXPECT_EQ(manifests.conflicts[0].describe(),
            "item 0 has vae_tiling false in manifest.rank0.jsonl but true in manifest.rank1.jsonl");
  tiled["vae_tiling"] = false;  // written by no run, but the same as none
  write_file(dir.file("manifest.rank1.jsonl"), tiled.dump() + "\n");
  EXPECT_TRUE(io::read_manifests(dir.path()).conflicts.empty());
}

// --weight-storage fp8 changes pixels: part of what an item is; a record without it kept the weights in the
// run dtype.
TEST(ManifestConflicts, WeightStorageConflictsAndItsAbsenceIsDefault) {
  TempDir dir;
  nlohmann::json stored = nlohmann::json::parse(ok(dir, 0, 0, 2));
  stored["weight_storage"] = "fp8";
  write_file(dir.file("manifest.rank0.jsonl"), ok(dir, 0, 0, 1));
  write_file(dir.file("manifest.rank1.jsonl"), stored.dump() + "\n");
  io::ManifestSet manifests = io::read_manifests(dir.path());
  ASSERT_EQ(manifests.conflicts.size(), 1u);
  EXPECT_EQ(manifests.conflicts[0].describe(),
            "item 0 has weight_storage \"default\" in manifest.rank0.jsonl but \"fp8\" in manifest.rank1.jsonl");
  stored["weight_storage"] = "default";  // written by no run, but the same as none
  write_file(dir.file("manifest.rank1.jsonl"), stored.dump() + "\n");
  EXPECT_TRUE(io::read_manifests(dir.path()).conflicts.empty());
}

TEST(ManifestConflicts, AFieldTheFirstManifestLacksIsComparedBetweenTheOthers) {
  TempDir dir;
  write_file(dir.file("manifest.a.jsonl"), R"({"index": 0, "status": "error", "error": "x", "finished_at": 1})" "\n");
  write_file(dir.file("manifest.b.jsonl"), ok(dir, 0, 1, 2));
  write_file(dir.file("manifest.c.jsonl"), ok(dir, 0, 2, 3));
  io::ManifestSet set = io::read_manifests(dir.path());
  ASSERT_EQ(set.conflicts.size(), 1u);
  EXPECT_EQ(set.conflicts[0].describe(), "item 0 has seed 1 in manifest.b.jsonl but 2 in manifest.c.jsonl");
}

TEST(ManifestConflicts, StatusReportsTheSameConflictsAsMerge) {
  TempDir dir;
  write_file(dir.file("manifest.rank0.jsonl"), ok(dir, 0, 0, 1) + ok(dir, 0, 7, 2) + ok(dir, 1, 1, 1));
  write_file(dir.file("manifest.rank1.jsonl"), ok(dir, 0, 7, 3) + ok(dir, 1, 5, 3));
  io::ManifestSet set = io::read_manifests(dir.path());
  std::vector<io::PromptSpec> specs(2);
  for (int i = 0; i < 2; ++i) specs[i].prompt = "p" + std::to_string(i), specs[i].line = i + 1;
  plan::RunStatus st = status_of(plan::ItemList(specs, {}), set);
  ASSERT_EQ(set.conflicts.size(), 1u);  // item 1 only: item 0's latest records agree
  ASSERT_EQ(st.conflicts.size(), 1u);
  EXPECT_EQ(st.conflicts[0].describe(), set.conflicts[0].describe());
  EXPECT_EQ(st.conflicts[0].index, 1);
}

// The reproduction from the bug report, through `dpinfer merge` and `dpinfer status`.
TEST(ManifestConflicts, MergeAndStatusAcceptAnOverwrittenThenShardedRun) {
  TempDir dir;
  write_file(dir.file("p.txt"), "p0\np1\n");
  std::filesystem::create_directories(dir.file("out"));
  auto out_ok = [&](int index, int seed, double t) {
    write_file(dir.file("out/" + plan::item_file_name(index)), "png");
    nlohmann::json j = {{"index", index}, {"prompt", "p" + std::to_string(index)}, {"seed", seed}, {"status", "ok"},
                        {"finished_at", t}, {"file_name", plan::item_file_name(index)}};
    return j.dump() + "\n";
  };
  write_file(dir.file("out/manifest.rank0.jsonl"), out_ok(0, 0, 1) + out_ok(1, 1, 1) + out_ok(0, 7, 2) + out_ok(1, 8, 2));
  write_file(dir.file("out/manifest.shard0-of-1.rank0.jsonl"), out_ok(0, 7, 3));
  RunResult m = run({dpinfer_binary(), "merge", dir.file("out")});
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_FALSE(contains(m.err, "conflict")) << m.err;
  auto rows = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["seed"], 7);
  RunResult s = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt")});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_FALSE(contains(s.err, "conflict")) << s.err;
}

// A writer killed mid-line leaves a torn last line. The next writer ends it first, so
// that its own first record stands on a line of its own and is read back.
TEST(ManifestWriter, ATornLastLineIsEndedBeforeTheNextRecord) {
  TempDir dir;
  const std::string path = dir.file("manifest.rank0.jsonl");
  write_file(path, ok(dir, 0, 0, 1) + "{\"index\": 1, \"prompt\": \"p1\", \"se");
  {
    io::ManifestWriter w(path);
    w.append(nlohmann::json::parse(ok(dir, 1, 1, 2)));
  }
  io::ManifestSet set = io::read_manifests(dir.path());
  EXPECT_EQ(set.torn_lines, 1u);
  ASSERT_EQ(set.items.count(1), 1u) << read_file(path);
  EXPECT_EQ(set.items[1].record["seed"], 1);
  EXPECT_EQ(set.items[0].record["seed"], 0);
}

// Issue 11, item 11: a manifest written before the rename has "image" (the image
// number within its JSONL line); merged today, its rows load in imagefolder.
TEST(ManifestUpgrade, AnOldImageColumnIsMergedAsImageIndex) {
  TempDir dir;
  write_file(dir.file(plan::item_file_name(0)), "png");
  nlohmann::json old = {{"index", 0},      {"prompt", "p0"},   {"seed", 0},
                        {"status", "ok"},  {"finished_at", 1}, {"file_name", plan::item_file_name(0)},
                        {"line", 1},       {"image", 2}};
  write_file(dir.file("manifest.rank0.jsonl"), old.dump() + "\n");
  io::MergeResult r = io::merge_manifests(dir.path());
  ASSERT_EQ(r.ok, 1u);
  auto rows = read_jsonl(dir.file("metadata.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["image_index"], 2);
  EXPECT_FALSE(rows[0].contains("image"));
  EXPECT_EQ(imagefolder_clashes(rows[0]), std::vector<std::string>{});
  EXPECT_EQ(imagefolder_clashes(old).size(), 1u) << "the old row itself breaks the rule";
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

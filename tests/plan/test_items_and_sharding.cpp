#include <gtest/gtest.h>

#include <set>

#include "dpinfer/plan/items.h"
#include "dpinfer/plan/manifest_names.h"
#include "dpinfer/plan/sharding.h"
#include "dpinfer/plan/slurm_nodelist.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using namespace dpinfer::plan;

TEST(Items, SeedsAreBasePlusIndexOrTheLinesSeedPlusImage) {
  std::vector<io::PromptSpec> specs(3);
  specs[0].prompt = "a";
  specs[0].num_images = 2;
  specs[1].prompt = "b";
  specs[1].seed = 100;
  specs[1].num_images = 3;
  specs[2].prompt = "c";
  ItemDefaults d;
  d.seed = 10;
  auto items = expand_items(specs, d);
  ASSERT_EQ(items.size(), 6u);
  std::vector<int64_t> seeds, images;
  for (const auto& it : items) seeds.push_back(it.seed), images.push_back(it.image);
  EXPECT_EQ(seeds, (std::vector<int64_t>{10, 11, 100, 101, 102, 15}));
  EXPECT_EQ(images, (std::vector<int64_t>{0, 1, 0, 1, 2, 0}));
  EXPECT_EQ(items[5].index, 5);
}

TEST(Items, FileNamesArePaddedToSixDigits) {
  EXPECT_EQ(item_file_name(42), "000042.png");
  EXPECT_EQ(item_file_name(1234567), "1234567.png");
}

TEST(Sharding, ContiguousFollowsAcceleratesSplit) {
  // 10 items on 4 ranks: 3,3,2,2.
  EXPECT_EQ(contiguous_range(10, 4, 0), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(contiguous_range(10, 4, 1), (std::pair<int64_t, int64_t>{3, 6}));
  EXPECT_EQ(contiguous_range(10, 4, 2), (std::pair<int64_t, int64_t>{6, 8}));
  EXPECT_EQ(contiguous_range(10, 4, 3), (std::pair<int64_t, int64_t>{8, 10}));
  // Fewer items than ranks: the last ranks get nothing, no duplicates.
  EXPECT_EQ(contiguous_range(2, 4, 3), (std::pair<int64_t, int64_t>{2, 2}));
}

TEST(Sharding, EveryStaticModeCoversEveryItemExactlyOnce) {
  for (ShardMode mode : {ShardMode::kContiguous, ShardMode::kStrided}) {
    for (int64_t n : {0, 1, 5, 17, 100}) {
      for (int world : {1, 2, 3, 8, 33}) {
        std::multiset<int64_t> seen;
        for (int r = 0; r < world; ++r)
          for (int64_t i : static_assignment(n, world, r, mode)) seen.insert(i);
        ASSERT_EQ(static_cast<int64_t>(seen.size()), n) << to_string(mode) << " n=" << n << " w=" << world;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen.count(i), 1u);
      }
    }
  }
}

TEST(Sharding, StridedTakesEveryWorldthItem) {
  EXPECT_EQ(static_assignment(7, 3, 1, ShardMode::kStrided), (std::vector<int64_t>{1, 4}));
}

TEST(Sharding, ParsesModesAndOuterShards) {
  EXPECT_EQ(parse_shard_mode("dynamic"), ShardMode::kDynamic);
  EXPECT_THROW(parse_shard_mode("random"), UsageError);
  OuterShard s = parse_outer_shard("3/10");
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.count, 10);
  for (const char* bad : {"10/10", "-1/3", "1/0", "a/b", "3", "/3", "3/", "1/2/3"})
    EXPECT_THROW(parse_outer_shard(bad), UsageError) << bad;
}

TEST(Sharding, DynamicChunksAreAtLeastABatch) {
  EXPECT_EQ(dynamic_chunk_size(10, 4, 2), 2);
  EXPECT_EQ(dynamic_chunk_size(100000, 4, 2), 8);
}

TEST(SlurmNodelist, ExpandsRangesPaddingAndSeveralGroups) {
  EXPECT_EQ(expand_nodelist("gpu[01-04,07],cpu-a[1-2]"),
            (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1", "cpu-a2"}));
  EXPECT_EQ(expand_nodelist("node1"), (std::vector<std::string>{"node1"}));
  EXPECT_EQ(expand_nodelist("n[8-10]"), (std::vector<std::string>{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_nodelist("n[08-10]"), (std::vector<std::string>{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_nodelist("rack[1-2]-n[1,3]"),
            (std::vector<std::string>{"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}));
  EXPECT_EQ(expand_nodelist("a,b[2],c"), (std::vector<std::string>{"a", "b2", "c"}));
  for (const char* bad : {"", "n[1-", "n[2-1]", "n]1[", "n[x]", "a,,b"}) EXPECT_THROW(expand_nodelist(bad), Error) << bad;
}

TEST(SlurmNodelist, TaskCountsPerNode) {
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), 0);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_THROW(slurm_tasks_on_node("x", 0, "SLURM_NTASKS_PER_NODE"), UsageError);
}

// Job arrays as outer shards (README, "Job arrays and --shard").
namespace {
EnvVars array_env(int id, int min, int max, int count, int step = 0) {
  EnvVars env{{"SLURM_ARRAY_TASK_ID", std::to_string(id)},
              {"SLURM_ARRAY_TASK_MIN", std::to_string(min)},
              {"SLURM_ARRAY_TASK_MAX", std::to_string(max)},
              {"SLURM_ARRAY_TASK_COUNT", std::to_string(count)}};
  if (step) env["SLURM_ARRAY_TASK_STEP"] = std::to_string(step);
  return env;
}

std::string shard_error(const EnvVars& env) {
  try {
    outer_shard_from_env(env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(OuterShardFromEnv, NoneOutsideAJobArray) {
  EXPECT_FALSE(outer_shard_from_env({}).has_value());
  EXPECT_FALSE(outer_shard_from_env({{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}}).has_value());
  OuterShardChoice c = choose_outer_shard("", {});
  EXPECT_FALSE(c.sharded);
  EXPECT_EQ(c.shard.count, 1);
}

TEST(OuterShardFromEnv, ARangeGivesDenseIndexes) {
  // --array=0-4: tasks 0..4 are shards 0/5..4/5; STEP unset means 1.
  for (int id = 0; id < 5; ++id) {
    auto c = outer_shard_from_env(array_env(id, 0, 4, 5));
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(c->sharded);
    EXPECT_EQ(c->shard.index, id);
    EXPECT_EQ(c->shard.count, 5);
    EXPECT_NE(c->source.find("SLURM_ARRAY_TASK_ID=" + std::to_string(id)), std::string::npos) << c->source;
  }
  // --array=1-3: ids start at 1, shards at 0.
  EXPECT_EQ(outer_shard_from_env(array_env(3, 1, 3, 3))->shard.index, 2);
}

TEST(OuterShardFromEnv, StepsAboveOneAreDivided) {
  // --array=0-10:2: ids 0,2,...,10 are shards 0/6..5/6.
  for (int id = 0; id <= 10; id += 2) {
    auto c = outer_shard_from_env(array_env(id, 0, 10, 6, 2));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->shard.index, id / 2);
    EXPECT_EQ(c->shard.count, 6);
  }
  // --array=100-190:10 (a MaxArraySize workaround: ids up to 190 with 10 tasks).
  EXPECT_EQ(outer_shard_from_env(array_env(150, 100, 190, 10, 10))->shard.index, 5);
}

TEST(OuterShardFromEnv, AnIrregularArrayNamesTheVariablesAndAsksForShard) {
  // --array=1,4,9: MIN 1, MAX 9, COUNT 3: not a range.
  std::string e = shard_error(array_env(4, 1, 9, 3));
  EXPECT_NE(e.find("SLURM_ARRAY_TASK_ID=4"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_ARRAY_TASK_MIN=1"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_ARRAY_TASK_MAX=9"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_ARRAY_TASK_COUNT=3"), std::string::npos) << e;
  EXPECT_NE(e.find("--shard I/N"), std::string::npos) << e;
  // A task id off the step, or outside MIN..MAX.
  EXPECT_NE(shard_error(array_env(3, 0, 10, 6, 2)), "");
  EXPECT_NE(shard_error(array_env(12, 0, 10, 6, 2)), "");
  // Missing or malformed variables are named.
  EnvVars no_count = array_env(1, 0, 4, 5);
  no_count.erase("SLURM_ARRAY_TASK_COUNT");
  EXPECT_NE(shard_error(no_count).find("SLURM_ARRAY_TASK_COUNT"), std::string::npos);
  EnvVars bad = array_env(1, 0, 4, 5);
  bad["SLURM_ARRAY_TASK_ID"] = "x";
  EXPECT_NE(shard_error(bad).find("SLURM_ARRAY_TASK_ID='x'"), std::string::npos);
}

TEST(OuterShardFromEnv, AnExplicitShardAlwaysWins) {
  OuterShardChoice c = choose_outer_shard("1/4", array_env(4, 1, 9, 3));  // even over an irregular array
  EXPECT_TRUE(c.sharded);
  EXPECT_EQ(c.shard.index, 1);
  EXPECT_EQ(c.shard.count, 4);
  EXPECT_NE(c.source.find("--shard 1/4"), std::string::npos);
  EXPECT_NE(c.source.find("SLURM_ARRAY_TASK_ID=4 is not used"), std::string::npos) << c.source;
  c = choose_outer_shard("", array_env(2, 0, 4, 5));
  EXPECT_EQ(c.shard.index, 2);
  EXPECT_THROW(choose_outer_shard("5/4", {}), UsageError);
}

TEST(OuterShardFromEnv, ArrayShardsThenRanksCoverEveryItemOnceEvenWithEmptyShards) {
  // Uneven splits, and fewer items than shards (the last shards are empty).
  for (int64_t n : {0, 1, 2, 7, 10, 101}) {
    for (int count : {1, 3, 4, 6}) {
      std::multiset<int64_t> seen;
      for (int id = 0; id < count; ++id) {
        auto c = outer_shard_from_env(array_env(2 * id, 0, 2 * (count - 1), count, 2));
        auto [b, e] = contiguous_range(n, c->shard.count, c->shard.index);
        ASSERT_LE(b, e);
        for (int rank = 0; rank < 2; ++rank)
          for (int64_t p : static_assignment(e - b, 2, rank, ShardMode::kContiguous)) seen.insert(b + p);
      }
      ASSERT_EQ(static_cast<int64_t>(seen.size()), n) << "n=" << n << " shards=" << count;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen.count(i), 1u);
    }
  }
  // 2 items in 4 shards: shards 2 and 3 are empty.
  EXPECT_EQ(contiguous_range(2, 4, 2), (std::pair<int64_t, int64_t>{2, 2}));
}

TEST(ManifestNames, RoundTrip) {
  EXPECT_EQ(manifest_file_name(std::nullopt, 3), "manifest.rank3.jsonl");
  EXPECT_EQ(manifest_file_name(OuterShard{2, 5}, 0), "manifest.shard2-of-5.rank0.jsonl");
  auto m = parse_manifest_file_name("manifest.shard2-of-5.rank11.jsonl");
  ASSERT_TRUE(m.has_value());
  ASSERT_TRUE(m->shard.has_value());
  EXPECT_EQ(m->shard->index, 2);
  EXPECT_EQ(m->shard->count, 5);
  EXPECT_EQ(m->rank, 11);
  m = parse_manifest_file_name("manifest.rank0.jsonl");
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->shard.has_value());
  for (const char* other : {"manifest.jsonl", "manifest.rank01.jsonl", "manifest.shard5-of-5.rank0.jsonl",
                            "manifest.rank0.jsonl.tmp", "metadata.jsonl", "manifest.rank-1.jsonl"})
    EXPECT_FALSE(parse_manifest_file_name(other).has_value()) << other;
}

#include <gtest/gtest.h>

#include <set>

#include "dpinfer/util/error.h"
#include "dpinfer/worker/items.h"
#include "dpinfer/worker/sharding.h"
#include "dpinfer/worker/slurm_nodelist.h"

using namespace dpinfer;
using namespace dpinfer::worker;

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

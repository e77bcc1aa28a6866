// plan::BatchPlan: the batches of a run, cut from the prompts file alone, and the outer
// shards, ranks and dynamic claims that take them whole.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "dpinfer/plan/batches.h"
#include "dpinfer/plan/items.h"

using namespace dpinfer;
using namespace dpinfer::plan;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

io::PromptSpec line(const std::string& prompt, int images = 1) {
  io::PromptSpec s;
  s.prompt = prompt;
  s.num_images = images;
  return s;
}

std::vector<ItemSpan> all_batches(const BatchPlan& plan) {
  std::vector<ItemSpan> out;
  for (int64_t b = 0; b < plan.size(); ++b) out.push_back(plan.at(b));
  return out;
}

/// Which batch each item of `plan` is in, as the ranks of a run of `world` ranks in `mode` take
/// them (static modes) through the shards of `shards`: what a run would make, batch by batch.
std::map<int64_t, ItemSpan> batches_as_shared(const BatchPlan& plan, int shards, int world, ShardMode mode) {
  std::map<int64_t, ItemSpan> of_item;
  for (int s = 0; s < shards; ++s) {
    const auto [first, end] = plan.shard_batches({s, shards});
    for (int r = 0; r < world; ++r) {
      const StaticShare share = static_share(end - first, world, r, mode);
      for (int64_t k = 0; k < share.size(); ++k) {
        const ItemSpan span = plan.at(first + share.at(k));
        for (int64_t i = span.first; i < span.end(); ++i) EXPECT_TRUE(of_item.emplace(i, span).second) << i;
      }
    }
  }
  return of_item;
}


TEST(BatchPlan, ATextFileIsOneGroupCutEveryBItems) {
  const std::vector<io::PromptSpec> specs = {line("a"), line("b"), line("c"), line("d"), line("e")};
  const BatchPlan plan(specs, 1, 2);
  EXPECT_EQ(plan.items(), 5);
  EXPECT_EQ(plan.groups(), 1);
  EXPECT_EQ(all_batches(plan), (std::vector<ItemSpan>{{0, 2}, {2, 2}, {4, 1}}));
  EXPECT_EQ(plan.short_batches(), 1);
  // Seeds, prompts, negative prompts and ids are per item: they never split a group.
  std::vector<io::PromptSpec> varied = specs;
  varied[1].seed = 9;
  varied[2].negative_prompt = "ugly";
  varied[3].id = "x";
  EXPECT_EQ(all_batches(BatchPlan(varied, 1, 2)), all_batches(plan));
}

TEST(BatchPlan, LinesThatSetOtherBatchFieldsStartAGroup) {
  // num_images 2, 1, 3 (steps 8), 1: groups of 3 items, 3 items, 1 item.
  std::vector<io::PromptSpec> specs = {line("a", 2), line("b"), line("c", 3), line("d")};
  specs[2].steps = 8;
  const BatchPlan plan(specs, 1, 2);
  EXPECT_EQ(plan.groups(), 3);
  EXPECT_EQ(all_batches(plan), (std::vector<ItemSpan>{{0, 2}, {2, 1}, {3, 2}, {5, 1}, {6, 1}}));
  EXPECT_EQ(plan.short_batches(), 3);
  for (auto set : std::vector<std::function<void(io::PromptSpec&)>>{
           [](io::PromptSpec& s) { s.guidance_scale = 3.5; }, [](io::PromptSpec& s) { s.width = 512; },
           [](io::PromptSpec& s) { s.height = 512; }, [](io::PromptSpec& s) { s.settings = nlohmann::json{{"x", 1}}; },
           [](io::PromptSpec& s) { s.loras = io::LoraSet{{"a.safetensors", 0.5}}; }}) {
    std::vector<io::PromptSpec> two = {line("a"), line("b")};
    set(two[1]);
    EXPECT_EQ(BatchPlan(two, 1, 4).size(), 2);
    set(two[0]);  // the same value on both lines: one group again
    EXPECT_EQ(BatchPlan(two, 1, 4).size(), 1);
  }
  // A line that sets none of num_images gets the run's --num-images.
  EXPECT_EQ(BatchPlan({line("a"), io::PromptSpec{}}, 3, 4).items(), 4);
}

TEST(BatchPlan, BatchOfIsTheInverseOfAt) {
  std::vector<io::PromptSpec> specs = {line("a", 5), line("b", 1), line("c", 7), line("d", 2)};
  specs[1].width = 64;
  for (int b : {1, 2, 3, 4, 16}) {
    const BatchPlan plan(specs, 1, b);
    int64_t next = 0;
    for (int64_t k = 0; k < plan.size(); ++k) {
      const ItemSpan span = plan.at(k);
      EXPECT_EQ(span.first, next) << "batches follow each other, b=" << b;
      EXPECT_GE(span.size, 1);
      EXPECT_LE(span.size, b);
      for (int64_t i = span.first; i < span.end(); ++i) EXPECT_EQ(plan.batch_of(i), k);
      next = span.end();
    }
    EXPECT_EQ(next, plan.items());
    EXPECT_LE(plan.short_batches(), plan.groups());
  }
  const BatchPlan plan(specs, 1, 4);
  EXPECT_THROW(plan.at(plan.size()), std::out_of_range);
  EXPECT_THROW(plan.batch_of(plan.items()), std::out_of_range);
}

// The promise behind it: an item's batch is the same whatever the outer shards, the world size and
// the static mode (the dynamic mode claims the same batches by number).
TEST(BatchPlan, AnItemsBatchDoesNotDependOnShardsRanksOrMode) {
  std::vector<io::PromptSpec> specs = {line("a", 7), line("b", 2), line("c", 9), line("d", 1), line("e", 4)};
  specs[1].steps = 2;
  specs[3].steps = 2;
  for (int b : {1, 2, 3, 4}) {
    const BatchPlan plan(specs, 1, b);
    const auto reference = batches_as_shared(plan, 1, 1, ShardMode::kContiguous);
    ASSERT_EQ(static_cast<int64_t>(reference.size()), plan.items());
    for (int shards : {1, 2, 3, 7})
      for (int world : {1, 2, 3, 5})
        for (ShardMode mode : {ShardMode::kContiguous, ShardMode::kStrided})
          EXPECT_EQ(batches_as_shared(plan, shards, world, mode), reference)
              << "b=" << b << " shards=" << shards << " world=" << world << " " << to_string(mode);
  }
}

TEST(BatchPlan, OuterShardsAreContiguousRunsOfWholeBatches) {
  const BatchPlan plan({line("a", 10)}, 1, 4);  // batches of 4, 4, 2
  EXPECT_EQ(plan.shard_items({0, 2}), (ItemSpan{0, 8}));
  EXPECT_EQ(plan.shard_items({1, 2}), (ItemSpan{8, 2}));
  EXPECT_EQ(plan.shard_items({3, 4}), (ItemSpan{10, 0}));  // more shards than batches: empty ones at the end
  int64_t covered = 0;
  for (int i = 0; i < 5; ++i) {
    const ItemSpan s = plan.shard_items({i, 5});
    EXPECT_EQ(s.first, covered);
    covered = s.end();
  }
  EXPECT_EQ(covered, 10);
}

TEST(BatchPlan, AMillionItemsCostLinesNotItems) {
  // 10,000 lines of 100,000 images: 10^9 items, the most a prompts file may give.
  std::vector<io::PromptSpec> specs(10000, line("p", 100000));
  specs[5000].steps = 3;  // three groups
  const BatchPlan plan(specs, 1, 3);
  EXPECT_EQ(plan.items(), kMaxItems);
  EXPECT_EQ(plan.groups(), 3);
  const int64_t last = plan.size() - 1;
  EXPECT_EQ(plan.at(last).end(), kMaxItems);
  EXPECT_EQ(plan.batch_of(kMaxItems - 1), last);
  // Line 5000 starts the second group: its first batch follows the first group's short last one.
  EXPECT_EQ(plan.batch_of(500000000), 166666667);
  EXPECT_EQ(plan.at(166666666), (ItemSpan{499999998, 2}));
  EXPECT_EQ(plan.at(166666667), (ItemSpan{500000000, 3}));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

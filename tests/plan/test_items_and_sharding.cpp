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
  const ItemList items(specs, d);
  ASSERT_EQ(items.size(), 6);
  std::vector<int64_t> seeds, images;
  for (int64_t i = 0; i < items.size(); ++i) seeds.push_back(items.at(i).seed), images.push_back(items.at(i).image);
  EXPECT_EQ(seeds, (std::vector<int64_t>{10, 11, 100, 101, 102, 15}));
  EXPECT_EQ(images, (std::vector<int64_t>{0, 1, 0, 1, 2, 0}));
  EXPECT_EQ(items.at(5).index, 5);
}

// --num-images: the images of every line that sets no num_images; a line's own wins, seeds
// and --seed-from prompt occurrences count the images, and a line's seed + its last image
// must fit whatever gave the count.
TEST(Items, NumImagesIsTheCountOfLinesThatSetNone) {
  std::vector<io::PromptSpec> specs(3);
  specs[0].prompt = "a";
  specs[1].prompt = "b";
  specs[1].num_images = 1;
  specs[2].prompt = "a";
  specs[2].seed = 100;
  ItemDefaults d;
  d.seed = 10;
  d.num_images = 3;
  const ItemList items(specs, d);
  ASSERT_EQ(items.size(), 7);
  std::vector<int64_t> seeds, images;
  std::vector<std::string> prompts;
  for (int64_t i = 0; i < items.size(); ++i) {
    const Item it = items.at(i);
    seeds.push_back(it.seed), images.push_back(it.image), prompts.push_back(it.prompt);
  }
  EXPECT_EQ(seeds, (std::vector<int64_t>{10, 11, 12, 13, 100, 101, 102}));
  EXPECT_EQ(images, (std::vector<int64_t>{0, 1, 2, 0, 0, 1, 2}));
  EXPECT_EQ(prompts, (std::vector<std::string>{"a", "a", "a", "b", "a", "a", "a"}));
  // By prompt: the second "a" line's images are occurrences 3, 4, 5 of "a".
  d.seed_from = SeedFrom::kPrompt;
  d.seed = 0;
  specs[2].seed.reset();
  const ItemList by_prompt(specs, d);
  EXPECT_EQ(by_prompt.at(4).seed, static_cast<int64_t>(prompt_seed_hash("a", 3)));
  EXPECT_EQ(by_prompt.at(6).seed, static_cast<int64_t>(prompt_seed_hash("a", 5)));
  // A line's seed whose last image would pass 2^63-1 with the run's count, named by its line.
  specs[2].seed = INT64_MAX - 1;
  specs[2].line = 9;
  d.seed_from = SeedFrom::kIndex;
  try {
    ItemList bad(specs, d);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 9: 'seed' 9223372036854775806 + 3 images (--num-images) passes 2^63-1"),
              std::string::npos)
        << e.what();
  }
  d.num_images = 2;
  EXPECT_EQ(ItemList(specs, d).at(4).seed, INT64_MAX);  // the last that fits
}

// Issue 11, item 4b: 100 lines of num_images 100000 reached 2.9 GB as a vector of
// items. An ItemList keeps the lines only, and makes item i when asked.
TEST(Items, AreMadeOnDemandFromAPrefixSumOfTheLines) {
  std::vector<io::PromptSpec> specs(10000);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].prompt = "p" + std::to_string(i);
    specs[i].line = static_cast<int>(i) + 1;
    specs[i].num_images = 100000;
  }
  specs[7].seed = 5;
  const ItemList items(specs, {});  // a billion items, kMaxItems, in a few hundred kilobytes
  ASSERT_EQ(items.size(), kMaxItems);
  const Item last = items.at(kMaxItems - 1);
  EXPECT_EQ(last.prompt, "p9999");
  EXPECT_EQ(last.line, 10000);
  EXPECT_EQ(last.image, 99999);
  EXPECT_EQ(last.seed, kMaxItems - 1);
  const Item first_of_line_8 = items.at(700000);
  EXPECT_EQ(first_of_line_8.prompt, "p7");
  EXPECT_EQ(first_of_line_8.image, 0);
  EXPECT_EQ(items.at(700003).seed, 8);  // the line's seed + j
  EXPECT_EQ(items.prompt_of(699999), "p6");
  EXPECT_THROW(items.at(kMaxItems), std::out_of_range);
  EXPECT_THROW(items.at(-1), std::out_of_range);
  // One more image is past the bound: refused, not allocated.
  specs.push_back(specs.back());
  specs.back().num_images = 1;
  EXPECT_THROW(ItemList(specs, {}), InputError);
}

TEST(Items, ASeedPastTwoToTheSixtyThreeIsRefusedNamingTheFirstItem) {
  std::vector<io::PromptSpec> specs(2);
  specs[0].num_images = 3;
  ItemDefaults d;
  d.seed = INT64_MAX - 1;
  try {
    ItemList items(specs, d);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("item 2 would get a seed past 2^63-1"), std::string::npos) << e.what();
  }
  specs[1].seed = 0;
  specs[0].num_images = 2;
  EXPECT_EQ(ItemList(specs, d).at(1).seed, INT64_MAX);  // the last that fits
}

// Issue 11, item 20: --seed-from prompt. The hash is fixed: these values are FNV-1a 64
// as items.h spells it, computed in Python.
TEST(Items, PromptSeedHashIsFnv1a64OfThePromptANulAndTheOccurrence) {
  EXPECT_EQ(prompt_seed_hash("a red fox", 0), 7608538195426722282ULL);
  EXPECT_EQ(prompt_seed_hash("a red fox", 1), 7608539294938350493ULL);
  EXPECT_EQ(prompt_seed_hash("", 0), 590701660006484765ULL);
  EXPECT_EQ(prompt_seed_hash("\xE5\xAF\x8C\xE5\xA3\xAB\xE5\xB1\xB1", 2), 735185895435879579ULL);  // 富士山
  EXPECT_EQ(prompt_seed_hash("a red fox", 1234567890123), 3504069147685772433ULL);
  EXPECT_EQ(parse_seed_from("prompt"), SeedFrom::kPrompt);
  EXPECT_EQ(to_string(SeedFrom::kIndex), "index");
  EXPECT_THROW(parse_seed_from("hash"), UsageError);
}

TEST(Items, PromptSeedsDoNotMoveWhenLinesAreInsertedAndRepeatsDiffer) {
  auto specs_of = [](const std::vector<std::string>& prompts) {
    std::vector<io::PromptSpec> specs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) specs[i].prompt = prompts[i], specs[i].line = static_cast<int>(i) + 1;
    return specs;
  };
  ItemDefaults d;
  d.seed = 10;
  d.seed_from = SeedFrom::kPrompt;
  const ItemList before(specs_of({"a", "b", "c", "a"}), d);
  const ItemList after(specs_of({"a", "x", "b", "c", "a"}), d);
  EXPECT_EQ(before.at(0).seed, 7337180837569817414);  // (10 + hash("a", 0)) mod 2^63
  EXPECT_EQ(before.at(1).seed, 9209711812082081191);
  EXPECT_EQ(before.at(2).seed, 8585476179957822012);
  EXPECT_EQ(before.at(3).seed, 7337181937081445625);  // the second "a": occurrence 1
  EXPECT_EQ(after.at(2).seed, before.at(1).seed);
  EXPECT_EQ(after.at(3).seed, before.at(2).seed);
  EXPECT_EQ(after.at(4).seed, before.at(3).seed);
  EXPECT_EQ(after.at(4).seed_from, SeedFrom::kPrompt);
  // By index, the same insertion moves every later seed.
  d.seed_from = SeedFrom::kIndex;
  EXPECT_NE(ItemList(specs_of({"a", "x", "b"}), d).at(2).seed, ItemList(specs_of({"a", "b"}), d).at(1).seed);
  // num_images counts as occurrences, a line's own seed still wins, and the sum wraps
  // modulo 2^63 rather than overflow.
  auto specs = specs_of({"a", "a", "a"});
  specs[0].num_images = 2;
  specs[2].seed = 3;
  d.seed_from = SeedFrom::kPrompt;
  d.seed = INT64_MAX;
  const ItemList items(specs, d);
  EXPECT_EQ(items.at(0).seed, 7337180837569817403);  // (2^63 - 1 + hash("a", 0)) mod 2^63
  EXPECT_EQ(items.at(1).seed, static_cast<int64_t>((uint64_t{INT64_MAX} + prompt_seed_hash("a", 1)) & uint64_t{INT64_MAX}));
  EXPECT_EQ(items.at(2).seed, static_cast<int64_t>((uint64_t{INT64_MAX} + prompt_seed_hash("a", 2)) & uint64_t{INT64_MAX}));
  EXPECT_EQ(items.at(3).seed, 3);
}

TEST(Items, FileNamesArePaddedToSixDigits) {
  EXPECT_EQ(item_file_name(42), "000042.png");
  EXPECT_EQ(item_file_name(1234567), "1234567.png");
}

// --files-per-dir N: item i in directory i / N (5 digits), as img2dataset's shards; 0 is flat.
TEST(Items, FileNamesInNumberedSubdirectories) {
  using dpinfer::plan::ImageFormat;
  EXPECT_EQ(item_file_name(42, ImageFormat::kPng, 0), "000042.png");
  EXPECT_EQ(item_file_name(42, ImageFormat::kJpeg, 0), "000042.jpg");
  // N = 1: a directory per item.
  EXPECT_EQ(item_file_name(0, ImageFormat::kPng, 1), "00000/000000.png");
  EXPECT_EQ(item_file_name(7, ImageFormat::kPng, 1), "00007/000007.png");
  // N = 3: 0-2 in 00000, 3-5 in 00001, ...
  EXPECT_EQ(item_file_name(2, ImageFormat::kPng, 3), "00000/000002.png");
  EXPECT_EQ(item_file_name(3, ImageFormat::kPng, 3), "00001/000003.png");
  EXPECT_EQ(item_file_name(9, ImageFormat::kJpeg, 3), "00003/000009.jpg");
  // N = 10000, img2dataset's default.
  EXPECT_EQ(item_file_name(9999, ImageFormat::kPng, 10000), "00000/009999.png");
  EXPECT_EQ(item_file_name(12345, ImageFormat::kPng, 10000), "00001/012345.png");
  EXPECT_EQ(item_file_name(12345, ImageFormat::kJpeg, 10000), "00001/012345.jpg");
  // Past the padding, the numbers grow: the last item a prompts file may give.
  const int64_t last = dpinfer::plan::kMaxItems - 1;
  EXPECT_EQ(item_file_name(last, ImageFormat::kPng, 10000), "99999/999999999.png");
  EXPECT_EQ(item_file_name(last, ImageFormat::kPng, 1), "999999999/999999999.png");
  EXPECT_EQ(item_file_name(last, ImageFormat::kPng, dpinfer::plan::kMaxFilesPerDir), "00000/999999999.png");
  EXPECT_TRUE(dpinfer::plan::is_item_dir_name("00000"));
  EXPECT_TRUE(dpinfer::plan::is_item_dir_name("999999999"));
  for (const char* name : {"0000", "0000a", "", "images", "00001.png", ".00000"})
    EXPECT_FALSE(dpinfer::plan::is_item_dir_name(name)) << name;
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

TEST(Sharding, AStaticShareIsTheAssignmentWithoutTheList) {
  for (ShardMode mode : {ShardMode::kContiguous, ShardMode::kStrided}) {
    for (int64_t n : {0, 1, 5, 17, 100}) {
      for (int world : {1, 2, 3, 8, 33}) {
        for (int r = 0; r < world; ++r) {
          const StaticShare share = static_share(n, world, r, mode);
          std::vector<int64_t> listed;
          for (int64_t k = 0; k < share.size(); ++k) listed.push_back(share.at(k));
          ASSERT_EQ(listed, static_assignment(n, world, r, mode)) << to_string(mode) << " n=" << n << " r=" << r;
        }
      }
    }
  }
  EXPECT_EQ(static_share(kMaxItems, 3, 2, ShardMode::kStrided).size(), 333333333);
  EXPECT_EQ(static_share(10, 2, 0, ShardMode::kDynamic).size(), 0);
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

TEST(Sharding, DynamicChunksAreOneToFourBatches) {
  EXPECT_EQ(dynamic_chunk_size(10, 4), 1);
  EXPECT_EQ(dynamic_chunk_size(0, 4), 1);
  EXPECT_EQ(dynamic_chunk_size(16, 2), 2);
  EXPECT_EQ(dynamic_chunk_size(100000, 4), 4);
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
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
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

}  // namespace DPINFER_UNITY_ID
}  // namespace

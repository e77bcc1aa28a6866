// --layout webdataset (issue 27): a rank's items in tar shards, exactly once across ranks, restarts
// and kill -9, and no truncated shard under a .tar name. The shards are read back with a small ustar
// reader here, and their parquet indexes with io::read_parquet (the module the worker writes them
// with; pyarrow reads them in webdataset_shards_load): an index beside a .tar always describes it.
// The webdataset package and datasets read the shards in webdataset_shards_load.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "dpinfer/io/parquet.h"
#include "support/run_outputs.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kWorker = DPINFER_TEST_WORKER;

struct Member {
  std::string name;
  uint64_t size = 0;
  std::string data;
};

/// The members of the ustar archive at `path`; fails the test where it is not a whole archive:
/// headers with good checksums, every member's padded bytes, then the two zero blocks.
std::vector<Member> tar_members(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Member> out;
  size_t at = 0;
  for (;;) {
    EXPECT_LE(at + 512, bytes.size()) << path << ": ends inside a header";
    if (at + 512 > bytes.size()) return out;
    const std::string h = bytes.substr(at, 512);
    if (h == std::string(512, '\0')) {
      EXPECT_EQ(bytes.size(), at + 1024) << path << ": the end marker is two zero blocks, then nothing";
      EXPECT_EQ(bytes.substr(at + 512, 512), std::string(512, '\0')) << path;
      return out;
    }
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    EXPECT_EQ(std::stoul(h.substr(148, 6), nullptr, 8), sum) << path << ": header checksum";
    EXPECT_EQ(h.substr(257, 6), std::string("ustar\0", 6)) << path;
    Member m{h.substr(0, h.find('\0')), std::stoull(h.substr(124, 11), nullptr, 8), {}};
    if (at + 512 + m.size <= bytes.size()) m.data = bytes.substr(at + 512, m.size);
    at += 512 + (m.size + 511) / 512 * 512;
    EXPECT_LE(at, bytes.size()) << path << ": member " << m.name << " is cut short";
    out.push_back(m);
  }
}

/// Every published shard of `out` and its members; how often each key appears across them.
std::map<std::string, int> keys_in_shards(const std::string& out, int* shards = nullptr) {
  std::map<std::string, int> keys;
  int n = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() != ".tar") continue;
    ++n;
    const std::vector<Member> members = tar_members(e.path().string());
    EXPECT_EQ(members.size() % 3, 0u) << e.path();
    for (size_t i = 0; i + 2 < members.size(); i += 3) {
      const std::string key = members[i].name.substr(0, members[i].name.find('.'));
      EXPECT_EQ(members[i].name, key + ".png");
      EXPECT_EQ(members[i + 1].name, key + ".txt");
      EXPECT_EQ(members[i + 2].name, key + ".json");
      ++keys[key];
    }
  }
  if (shards) *shards = n;
  return keys;
}

const dpinfer::io::ParquetColumn& column(const dpinfer::io::ParquetTable& t, const std::string& name) {
  for (const auto& c : t.columns)
    if (c.name == name) return c;
  throw std::runtime_error("no column " + name);
}

/// The rows of a parquet index against the tar members they describe (key, .txt, .json), in order.
void expect_index_describes(const dpinfer::io::ParquetTable& index, const std::vector<Member>& members,
                            const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(index.rows) * 3, members.size()) << what;
  const auto& key = column(index, "key");
  const auto& caption = column(index, "caption");
  const auto& status = column(index, "status");
  const auto& width = column(index, "width");
  const auto& seed = column(index, "seed");
  const auto& item = column(index, "index");
  for (size_t r = 0; r < static_cast<size_t>(index.rows); ++r) {
    const nlohmann::json record = nlohmann::json::parse(members[3 * r + 2].data);
    EXPECT_EQ(key.strings[r] + ".png", members[3 * r].name) << what << " row " << r;
    EXPECT_EQ(caption.strings[r], members[3 * r + 1].data) << what << " row " << r;
    EXPECT_EQ(status.strings[r], "success") << what;
    EXPECT_EQ(width.ints[r], record["width"].get<int64_t>()) << what;
    EXPECT_EQ(seed.ints[r], record["seed"].get<int64_t>()) << what;
    EXPECT_EQ(item.ints[r], record["index"].get<int64_t>()) << what;
    EXPECT_EQ(key.strings[r], record["key"].get<std::string>()) << what;
  }
}

/// Every parquet index of `out` describes its tar, and none stands without one; returns how many
/// tars have one. `index.parquet`, when there, lists every shard's members by index. In a build
/// without parquet (no pyarrow when CMake configured), how many tars there are: there is no index.
int check_indexes(const std::string& out) {
#if !DPINFER_TEST_PARQUET
  int shards = 0;
  keys_in_shards(out, &shards);
  return shards;
#endif
  int indexed = 0;
  std::map<int64_t, std::string> all;  // index -> key, from the tars
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".parquet" && name != "index.parquet") {
      EXPECT_TRUE(fs::exists(out + "/" + e.path().stem().string() + ".tar")) << name << " stands without its tar";
    }
    if (e.path().extension() != ".tar") continue;
    const std::vector<Member> members = tar_members(e.path().string());
    for (size_t i = 2; i < members.size(); i += 3) {
      const nlohmann::json record = nlohmann::json::parse(members[i].data);
      all[record["index"].get<int64_t>()] = record["key"].get<std::string>();
    }
    const std::string index = out + "/" + e.path().stem().string() + ".parquet";
    if (!fs::exists(index)) continue;
    ++indexed;
    expect_index_describes(dpinfer::io::read_parquet(index), members, index);
  }
  if (fs::exists(out + "/index.parquet")) {
    const dpinfer::io::ParquetTable t = dpinfer::io::read_parquet(out + "/index.parquet");
    EXPECT_EQ(static_cast<size_t>(t.rows), all.size());
    size_t r = 0;
    for (const auto& [index, key] : all) {
      if (r >= static_cast<size_t>(t.rows)) break;
      EXPECT_EQ(column(t, "index").ints[r], index);
      EXPECT_EQ(column(t, "key").strings[r], key);
      ++r;
    }
  }
  return indexed;
}

/// `dpinfer launch` of two test-worker ranks writing `prompts` into WebDataset shards of `shard_size` in `out`.
std::vector<std::string> webdataset_launch(const std::string& prompts, const std::string& out, int shard_size,
                                           const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate",
                                   prompts, "--out", out, "--layout", "webdataset", "--shard-size",
                                   std::to_string(shard_size)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::string key_of(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%09d", i);
  return buf;
}


TEST(WebDataset, TwoRanksWriteEachItemOnceInShardsOfTheSize) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(11));
  const std::string out = dir.file("out");
  const std::vector<std::string> argv = webdataset_launch(dir.file("p.txt"), out, 3, {"--shard-mode", "dynamic"});
  RunResult r = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int shards = 0;
  const std::map<std::string, int> keys = keys_in_shards(out, &shards);
  ASSERT_EQ(keys.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(keys.count(key_of(i)) ? keys.at(key_of(i)) : 0, 1) << i;
  EXPECT_GE(shards, 4) << "at most 3 items a shard";
  // Each shard's stats, and records that name it.
  int64_t counted = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().string().size() > 11 && e.path().string().rfind("_stats.json") == e.path().string().size() - 11)
      counted += nlohmann::json::parse(read_file(e.path().string()))["count"].get<int64_t>();
  EXPECT_EQ(counted, 11);
  for (const auto& rec : read_jsonl(out + "/metadata.jsonl")) {
    EXPECT_TRUE(fs::exists(out + "/" + rec["file_name"].get<std::string>())) << rec.dump();
    EXPECT_EQ(rec["key"], key_of(rec["index"].get<int>()));
  }
  EXPECT_EQ(run({dpinfer_binary(), "status", out}, {}, 60s).exit_code, 0);
  // Each shard's index, and the dataset's.
  EXPECT_EQ(check_indexes(out), shards);
#if DPINFER_TEST_PARQUET
  ASSERT_TRUE(fs::exists(out + "/index.parquet"));
  // A shard whose index is missing (a run stopped between its tar and its index) gets it from
  // dpinfer merge, the same file the worker wrote.
  const std::string first = out + "/" + key_of(0) + ".parquet";
  const std::string written = read_file(first);
  fs::remove(first);
  RunResult merged = run({dpinfer_binary(), "merge", out}, {}, 60s);
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_NE(merged.err.find("1 shard(s) had no index"), std::string::npos) << merged.err;
  EXPECT_EQ(read_file(first), written);
  EXPECT_EQ(check_indexes(out), shards);
#endif
  // A rerun makes nothing again and adds no shard.
  RunResult again = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  int shards_after = 0;
  EXPECT_EQ(keys_in_shards(out, &shards_after), keys);
  EXPECT_EQ(shards_after, shards);
  // Another layout in the same --out is refused, naming the one it was made with.
  RunResult flat = run({kWorker, "generate", dir.file("p.txt"), "--out", out}, {{"CUDA_VISIBLE_DEVICES", ""}}, 60s);
  EXPECT_EQ(flat.exit_code, 2);
  EXPECT_NE(flat.err.find("give --layout webdataset to resume it"), std::string::npos) << flat.err;
}

// kill -9 of the launcher mid-run, then the same command again: nothing lost, nothing twice,
// no partial shard under a .tar name, the killed run's temporaries gone.
TEST(WebDataset, AKilledRunLosesAtMostItsOpenShardsAndTheRerunCompletesIt) {
  TempDir dir;
  constexpr int n = 30;
  write_file(dir.file("p.txt"), numbered_prompts(n));
  const std::string out = dir.file("out");
  const std::vector<std::string> argv = webdataset_launch(dir.file("p.txt"), out, 4);
  {
    Child launcher(argv, {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "60"}});
    ASSERT_TRUE(wait_until([&] { return fs::exists(out) && keys_in_shards(out).size() >= 8; }, 60s))
        << launcher.err_so_far();
    launcher.signal(SIGKILL);
    launcher.wait(30s);
  }
  // The keeper kills the workers when the launcher dies; let them go.
  std::this_thread::sleep_for(500ms);
  const std::map<std::string, int> before = keys_in_shards(out);
  EXPECT_LT(before.size(), static_cast<size_t>(n)) << "the kill came mid-run";
  for (const auto& [key, count] : before) EXPECT_EQ(count, 1) << key;
  check_indexes(out);  // what the kill left: no index that disagrees with its tar
  RunResult r = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::map<std::string, int> keys = keys_in_shards(out);
  ASSERT_EQ(keys.size(), static_cast<size_t>(n));
  for (const auto& [key, count] : keys) EXPECT_EQ(count, 1) << key << " in more than one shard";
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".dpinfer-tmp"), std::string::npos)
        << e.path() << ": the killed run's temporary is left";
  EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").size(), static_cast<size_t>(n));
  int shards = 0;
  keys_in_shards(out, &shards);
  EXPECT_EQ(check_indexes(out), shards) << "every shard has its index after the rerun";
#if DPINFER_TEST_PARQUET
  EXPECT_TRUE(fs::exists(out + "/index.parquet"));
#endif
}

// SIGTERM (SLURM's preemption): each rank publishes its open shard after its current batch, so
// every item made is in a published shard and recorded once; the same command finishes the rest.
TEST(WebDataset, AStoppedRunPublishesItsOpenShards) {
  TempDir dir;
  constexpr int n = 40;
  write_file(dir.file("p.txt"), numbered_prompts(n));
  const std::string out = dir.file("out");
  const std::vector<std::string> argv = webdataset_launch(dir.file("p.txt"), out, 5);
  Child launcher(argv, {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "60"}});
  ASSERT_TRUE(wait_until([&] { return fs::exists(out) && !keys_in_shards(out).empty(); }, 60s)) << launcher.err_so_far();
  launcher.signal(SIGTERM);
  RunResult stopped = launcher.wait(60s);
  EXPECT_EQ(stopped.exit_code, 143) << stopped.err;
  const std::map<std::string, int> keys = keys_in_shards(out);
  const std::map<int, int> ok = ok_counts(out);
  EXPECT_LT(keys.size(), static_cast<size_t>(n)) << "stopped mid-run";
  EXPECT_EQ(keys.size(), ok.size()) << "every recorded item is in a published shard, and the reverse";
  for (const auto& [key, count] : keys) EXPECT_EQ(count, 1) << key;
  int stopped_shards = 0;
  keys_in_shards(out, &stopped_shards);
  EXPECT_EQ(check_indexes(out), stopped_shards) << "a stopped run publishes each shard with its index";
  RunResult r = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::map<std::string, int> all = keys_in_shards(out);
  ASSERT_EQ(all.size(), static_cast<size_t>(n));
  for (const auto& [key, count] : all) EXPECT_EQ(count, 1) << key;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

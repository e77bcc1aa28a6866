// `dpinfer generate` (the test worker) against the reproducers of issue 11's parser
// items: exit 2 and one escaped line instead of a crash, bounded memory for large
// num_images, `#` comments, and --seed-from prompt end to end.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kWorker = DPINFER_TEST_WORKER;

RunResult generate(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kWorker, "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
}

size_t line_count(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

/// The seed of each prompt among the run's metadata rows.
std::map<std::string, int64_t> seeds_by_prompt(const std::string& out) {
  std::map<std::string, int64_t> seeds;
  for (const auto& row : read_jsonl(out + "/metadata.jsonl")) seeds[row["prompt"]] = row["seed"].get<int64_t>();
  return seeds;
}


// Issue 11, item 1, the audit's reproducer: exit 139 before.
TEST(InputHardening, DeeplyNestedJsonlExits2WithOneLine) {
  TempDir dir;
  const int n = 100000;
  write_file(dir.file("deep.jsonl"), "{\"prompt\":\"a\",\"steps\":" + std::string(n, '[') + std::string(n, ']') + "}\n");
  RunResult r = generate({dir.file("deep.jsonl"), "--device", "cpu", "--out", dir.file("o")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "deep.jsonl' line 1: invalid JSON (nested deeper than 64 levels)")) << r.err;
}

// Issue 11, item 4a: --steps 2000000000 reached more than 6 GiB.
TEST(InputHardening, CommandLineStepsAndSizesHaveTheJsonlBounds) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a\n");
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--steps", "2000000000"}, "--steps: expected 1..10000, got 2000000000"},
           {{"--width", "1048576"}, "--width: expected a multiple of 8 in 8..16384, got 1048576"},
           {{"--height", "16392"}, "--height: expected a multiple of 8 in 8..16384, got 16392"}}) {
    std::vector<std::string> argv = {dir.file("p.txt"), "--out", dir.file("o")};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = generate(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, message)) << r.err;
  }
}

// Issue 11, item 4b: 100 lines of num_images 100000 were ten million items in memory
// (2.9 GB) before sharding. Now a shard of ten of them costs what ten cost.
TEST(InputHardening, TenMillionItemsAreNotMaterialised) {
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "{\"prompt\": \"p" + std::to_string(i) + "\", \"num_images\": 100000}\n";
  write_file(dir.file("big.jsonl"), lines);
  RunResult r = generate({dir.file("big.jsonl"), "--out", dir.file("o"), "--shard", "999999/1000000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = read_jsonl(dir.file("o/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_EQ(rows.front()["index"], 9999990);
  EXPECT_EQ(rows.front()["prompt"], "p99");
  EXPECT_EQ(rows.front()["image_index"], 99990);
  EXPECT_EQ(rows.front()["seed"], 9999990);
  struct rusage usage {};
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &usage), 0);
  EXPECT_LT(usage.ru_maxrss, 1024 * 1024) << "peak RSS of the worker in KiB";  // 10 million items took ~2.5 GB
}

// Issue 11, item 5: a JSONL key with ESC and newlines reaches stderr escaped.
TEST(InputHardening, HostileKeysReachTheTerminalEscaped) {
  TempDir dir;
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a\", \"\\u001b]0;pwned\\u0007\\u001b[2J\\nx\": 1}\n");
  RunResult r = generate({dir.file("p.jsonl"), "--out", dir.file("o")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "unknown key '\\x1B]0;pwned\\x07\\x1B[2J\\nx'")) << r.err;
}

// Issue 11, item 10: a prompts file that links to itself.
TEST(InputHardening, ASelfLoopingPromptsFileIsNamedAsALoop) {
  TempDir dir;
  ASSERT_EQ(::symlink("loop.txt", dir.file("loop.txt").c_str()), 0);
  RunResult r = generate({dir.file("loop.txt"), "--out", dir.file("o")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // Said by the preflight check (plan/preflight.h), before the model loads.
  EXPECT_TRUE(contains(r.err, "'" + dir.file("loop.txt") + "': a loop of symbolic links")) << r.err;
}

// Issue 11, item 19.
TEST(InputHardening, TextCommentsAreSkippedAndBackslashHashIsAPrompt) {
  TempDir dir;
  write_file(dir.file("p.txt"), "# captions for the demo\nfirst\n  # not this\n\\#second\n");
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("o")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = read_jsonl(dir.file("o/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["prompt"], "first");
  EXPECT_EQ(rows[0]["line"], 2);
  EXPECT_EQ(rows[1]["prompt"], "#second");
  EXPECT_EQ(rows[1]["line"], 4);
}

// Issue 11, item 20: --seed-from prompt gives each prompt the same seed and image
// wherever its line is, records itself, and a resume with the other mode is refused.
TEST(InputHardening, SeedFromPromptIsStableRecordedAndCheckedOnResume) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a\nb\nc\n");
  write_file(dir.file("q.txt"), "x\na\nb\nc\n");  // a line inserted at the top
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("p"), "--seed", "10", "--seed-from", "prompt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto seeds = seeds_by_prompt(dir.file("p"));
  // (10 + prompt_seed_hash(prompt, 0)) mod 2^63, as tests/plan computes them in Python.
  EXPECT_EQ(seeds.at("a"), 7337180837569817414);
  EXPECT_EQ(seeds.at("b"), 9209711812082081191);
  EXPECT_EQ(seeds.at("c"), 8585476179957822012);
  for (const auto& row : read_jsonl(dir.file("p/metadata.jsonl"))) EXPECT_EQ(row["seed_from"], "prompt");
  auto run_json = nlohmann::json::parse(read_file(dir.file("p/run.json")));
  EXPECT_EQ(run_json["options"]["seed_from"], "prompt");
  EXPECT_EQ(run_json["item_defaults"]["seed_from"], "prompt");

  ASSERT_EQ(generate({dir.file("q.txt"), "--out", dir.file("q"), "--seed", "10", "--seed-from", "prompt"}).exit_code, 0);
  const auto moved = seeds_by_prompt(dir.file("q"));
  for (const char* p : {"a", "b", "c"}) EXPECT_EQ(moved.at(p), seeds.at(p)) << p;
  // The same pixels: item 0 of p.txt is item 1 of q.txt.
  EXPECT_EQ(read_png(dir.file("p/000000.png")).pixels, read_png(dir.file("q/000001.png")).pixels);

  // A resume with the other mode: the seeds differ, and it stops.
  RunResult by_index = generate({dir.file("p.txt"), "--out", dir.file("p"), "--seed", "10"});
  EXPECT_EQ(by_index.exit_code, 2) << by_index.err;
  EXPECT_TRUE(contains(by_index.err, "made with seed 7337180837569817414")) << by_index.err;
  // When every line gives its seed, the seeds agree, and seed_from alone tells the runs apart.
  write_file(dir.file("s.jsonl"), "{\"prompt\": \"a\", \"seed\": 1}\n");
  ASSERT_EQ(generate({dir.file("s.jsonl"), "--out", dir.file("s"), "--seed-from", "prompt"}).exit_code, 0);
  RunResult mixed = generate({dir.file("s.jsonl"), "--out", dir.file("s")});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "made with seed_from \"prompt\"")) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "this run makes it with seed_from \"index\"")) << mixed.err;
}

// Found by tests/fuzz/fuzz_generate_config: a path that is not UTF-8 (a Latin-1 file
// name, legal on Linux) made run.json's dump() throw: exit 1 with nlohmann's message.
TEST(InputHardening, APromptsFileNamedInLatin1RunsAndRunJsonIsWritten) {
  TempDir dir;
  const std::string name = dir.file("caf\xE9.txt");
  write_file(name, "a\n");
  RunResult r = generate({name, "--out", dir.file("o")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto run_json = nlohmann::json::parse(read_file(dir.file("o/run.json")));
  EXPECT_EQ(run_json["options"]["prompts"], dir.file("caf\xEF\xBF\xBD.txt"));  // U+FFFD for the byte
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

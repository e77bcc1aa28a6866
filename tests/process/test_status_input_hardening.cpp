// `dpinfer status` (the real binary, no LibTorch) on the prompts files of issue 11:
// items made on demand, and records quoted briefly.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
namespace fs = std::filesystem;

// Issue 11, item 4b: status expanded every item of the file (ten million here, ~2.5 GB).
TEST(StatusInputHardening, TenMillionItemsAreCountedNotMaterialised) {
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "{\"prompt\": \"p" + std::to_string(i) + "\", \"num_images\": 100000}\n";
  write_file(dir.file("big.jsonl"), lines);
  fs::create_directories(dir.file("out"));
  nlohmann::json rec = {{"index", 9999999}, {"prompt", "p99"}, {"seed", 9999999}, {"status", "ok"},
                        {"file_name", "9999999.png"}, {"finished_at", 1.0}};
  write_file(dir.file("out/manifest.rank0.jsonl"), rec.dump() + "\n");
  write_file(dir.file("out/9999999.png"), "png");
  RunResult r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("big.jsonl")});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.out, "total: 1/10000000 done, 0 failed, 9999999 missing")) << r.out;
  struct rusage usage {};
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &usage), 0);
  EXPECT_LT(usage.ru_maxrss, 200 * 1024) << "peak RSS of dpinfer status in KiB";
}

// Issue 11, item 5: a record from another prompts file is quoted briefly and escaped.
TEST(StatusInputHardening, AForeignRecordsPromptIsQuotedBriefly) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  fs::create_directories(dir.file("out"));
  nlohmann::json rec = {{"index", 0}, {"prompt", "\x1b]0;t\x07" + std::string(1'000'000, 'q')}, {"seed", 0},
                        {"status", "ok"}, {"file_name", "000000.png"}, {"finished_at", 1.0}};
  write_file(dir.file("out/manifest.rank0.jsonl"), rec.dump() + "\n");
  RunResult r = run({dpinfer_binary(), "status", dir.file("out"), "--prompts", dir.file("p.txt")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(r.err.size(), 600u) << r.err.size();
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
  EXPECT_TRUE(contains(r.err, "records item 0 with prompt \"\\u001b]0;t\\u0007qqq")) << r.err;
}

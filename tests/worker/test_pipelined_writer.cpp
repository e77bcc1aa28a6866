// The writer thread (worker/write_queue.h, --write-queue) as real processes with real
// signals: PNGs written while the next batch denoises keep the serial loop's
// guarantees. Large images of random pixels (the test pipeline's) make the writer
// slower than the test pipeline's denoising, so that the queue fills up.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/png_reader.h"
#include "support/run_outputs.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kWorker = DPINFER_TEST_WORKER;

std::vector<std::string> generate_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kWorker, "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

RunResult generate(const std::vector<std::string>& args) {
  return run(generate_argv(args), {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
}

size_t png_count(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".png";
  return n;
}

/// Every item of `n` made once: one "ok" record each, its PNG there and whole, no
/// temporary file left, one metadata.jsonl row each.
void expect_each_item_once(const std::string& out, int n) {
  auto counts = ok_counts(out);
  ASSERT_EQ(counts.size(), static_cast<size_t>(n));
  for (auto [index, c] : counts) EXPECT_EQ(c, 1) << "item " << index;
  EXPECT_EQ(png_count(out), static_cast<size_t>(n));
  for (const auto& e : fs::directory_iterator(out)) {
    EXPECT_EQ(e.path().filename().string().find(".dpinfer-tmp"), std::string::npos) << e.path();
    if (e.path().extension() == ".png") {
      EXPECT_EQ(read_png(e.path().string()).width, 512) << e.path();
    }
  }
  EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").size(), static_cast<size_t>(n));
}

// 512x512 random pixels: some 800 KB of PNG that zlib cannot shrink, tens of
// milliseconds to encode and fsync, against a few to make.
const std::vector<std::string> kBigImages = {"--width", "512", "--height", "512"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}


// A kill -9 while the queue is full loses the queued images, which no manifest
// records, and at most leaves a PNG that none records or a temporary file: the rerun
// makes each of those items, once.
TEST(PipelinedWriter, KillMinus9WhileTheQueueIsFullThenResumeMakesEveryItemExactlyOnce) {
  TempDir dir;
  const int n = 40;
  write_file(dir.file("p.txt"), numbered_prompts(n));
  const std::string out = dir.file("out");
  const auto args = with({dir.file("p.txt"), "--out", out, "--write-queue", "4", "-v"}, kBigImages);
  {
    Child worker(generate_argv(args), {{"CUDA_VISIBLE_DEVICES", ""}});
    ASSERT_TRUE(wait_until([&] { return contains(worker.err_so_far(), "the write queue is full (4 image(s))"); }, 60s))
        << worker.err_so_far();
    ASSERT_TRUE(wait_until([&] { return fs::exists(out) && png_count(out) >= 2; }, 60s)) << worker.err_so_far();
    worker.signal(SIGKILL);
    RunResult killed = worker.wait(10s);
    EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  }
  EXPECT_LT(ok_counts(out).size(), static_cast<size_t>(n)) << "the kill came mid-run";
  RunResult rest = generate(args);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  expect_each_item_once(out, n);
}

// SIGTERM: the loop stops after the batch in flight, and the images already made (in
// the queue) are written and recorded before the exit, which is 143 as before.
TEST(PipelinedWriter, SigtermWritesTheQueuedImagesThenExits143) {
  TempDir dir;
  const int n = 40;
  write_file(dir.file("p.txt"), numbered_prompts(n));
  const std::string out = dir.file("out");
  const auto args = with({dir.file("p.txt"), "--out", out, "--write-queue", "6", "-v"}, kBigImages);
  Child worker(generate_argv(args), {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return contains(worker.err_so_far(), "the write queue is full (6 image(s))"); }, 60s))
      << worker.err_so_far();
  worker.signal(SIGTERM);
  RunResult r = worker.wait(30s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_TRUE(contains(r.err, "stopped by SIGTERM")) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(stopping: writing the (\d+) item\(s\) already made first)")))
      << r.err;
  EXPECT_GE(std::stoi(m[1]), 1) << "the queue held images when the signal came";
  EXPECT_FALSE(contains(r.err, "not yet written")) << "every queued image was written: " << r.err;
  const size_t made = png_count(out);
  EXPECT_LT(made, static_cast<size_t>(n)) << "the signal came mid-run";
  EXPECT_EQ(ok_counts(out).size(), made) << "each PNG is recorded, each record has its PNG";
  for (auto [index, c] : ok_counts(out)) {
    EXPECT_EQ(c, 1) << "item " << index;
    EXPECT_TRUE(fs::exists(out + "/" + std::string(6 - std::to_string(index).size(), '0') + std::to_string(index) + ".png"));
  }
  RunResult rest = generate(args);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_TRUE(contains(rest.err, "skipped " + std::to_string(made) + " item(s)")) << rest.err;
  expect_each_item_once(out, n);
}

// --stop-timeout bounds the drain too: with 0, what still waits is dropped at once,
// unrecorded, and the next run makes it.
TEST(PipelinedWriter, SigtermWithStopTimeout0LeavesTheQueuedImagesToTheNextRun) {
  TempDir dir;
  const int n = 40;
  write_file(dir.file("p.txt"), numbered_prompts(n));
  const std::string out = dir.file("out");
  const auto args = with({dir.file("p.txt"), "--out", out, "--write-queue", "8", "-v"}, kBigImages);
  Child worker(generate_argv(with(args, {"--stop-timeout", "0"})), {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return contains(worker.err_so_far(), "the write queue is full (8 image(s))"); }, 60s))
      << worker.err_so_far();
  worker.signal(SIGTERM);
  RunResult r = worker.wait(30s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_TRUE(contains(r.err, "item(s) not yet written after --stop-timeout 0; the next run makes them")) << r.err;
  const size_t made = png_count(out);
  EXPECT_EQ(ok_counts(out).size(), made) << "what was dropped is neither written nor recorded";
  RunResult rest = generate(args);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  expect_each_item_once(out, n);
}

// An item whose PNG cannot be written (its name is taken by a directory) fails alone,
// recorded with the same error and the same exit status (3) as in the serial loop.
TEST(PipelinedWriter, AWriteErrorOnTheWriterThreadIsRecordedAsInTheSerialLoop) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(6));
  std::map<std::string, std::string> failure;
  for (const std::string queue : {"0", "4"}) {
    const std::string out = dir.file("out" + queue);
    fs::create_directories(out + "/000002.png/x");
    RunResult r = generate({dir.file("p.txt"), "--out", out, "--write-queue", queue, "--batch-size", "2"});
    EXPECT_EQ(r.exit_code, 3) << "--write-queue " << queue << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "item 2 failed")) << r.err;
    auto failures = read_jsonl(out + "/failures.jsonl");
    ASSERT_EQ(failures.size(), 1u) << r.err;
    EXPECT_EQ(failures[0]["index"], 2);
    // The paths name the directory, and the temporary the writer's pid: keep the rest.
    failure[queue] = std::regex_replace(failures[0]["error"].get<std::string>(),
                                        std::regex("out" + queue + R"(/(\.000002\.png\.[^']*-tmp)?)"), "OUT/");
    EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").size(), 5u);
  }
  EXPECT_EQ(failure["0"], failure["4"]);
  EXPECT_EQ(failure["4"], "cannot rename '" + dir.path() + "/OUT/' to '" + dir.path() + "/OUT/000002.png': Is a directory");
}

// A full disk on the writer thread stops the run at once with the serial loop's status
// and message; nothing is recorded as failed, and nothing after the first ENOSPC is tried.
TEST(PipelinedWriter, AFullDiskOnTheWriterThreadStopsTheRunAsInTheSerialLoop) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(20));
  for (const std::string queue : {"0", "8"}) {
    const std::string out = dir.file("out" + queue);
    // 256x256 random pixels: about 197 KB a PNG, so two fit in 400k.
    TmpfsMount disk(out, "400k");
    if (!disk.ok()) GTEST_SKIP() << disk.why();
    RunResult r = generate({dir.file("p.txt"), "--out", out, "--width", "256", "--height", "256", "--write-queue", queue});
    EXPECT_EQ(r.exit_code, 1) << "--write-queue " << queue << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "of --out '" + out + "' is full (")) << r.err;
    EXPECT_TRUE(contains(r.err, "No space left on device")) << r.err;
    EXPECT_FALSE(contains(r.err, "failed:")) << "no item is recorded as failed: " << r.err;
    int errors = 0;
    for (const auto& e : fs::directory_iterator(out))
      if (e.path().filename().string().rfind("manifest", 0) == 0)
        for (const auto& rec : read_jsonl(e.path().string())) errors += rec["status"] != "ok";
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(ok_counts(out).size(), png_count(out));
  }
}

// The writer changes when a PNG is written, never what: the same bytes, and the same
// records but for their timings, with and without it.
TEST(PipelinedWriter, TheSameFilesAndRecordsWithAndWithoutTheWriterThread) {
  TempDir dir;
  std::string prompts = numbered_prompts(10);
  prompts += "a NAN-ITEM here\nthis FAIL-ITEM too\n";
  write_file(dir.file("p.txt"), prompts);
  std::map<std::string, std::vector<nlohmann::json>> rows;
  for (const std::string queue : {"0", "3"}) {
    const std::string out = dir.file("out" + queue);
    RunResult r = generate({dir.file("p.txt"), "--out", out, "--write-queue", queue, "--batch-size", "4"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    for (const std::string name : {"metadata.jsonl", "failures.jsonl"})
      for (nlohmann::json rec : read_jsonl(out + "/" + name)) {
        for (const char* key : {"seconds", "finished_at"}) rec.erase(key);
        rows[queue].push_back(rec);
      }
  }
  EXPECT_EQ(rows["0"], rows["3"]);
  EXPECT_EQ(rows["0"].size(), 12u);
  for (const auto& e : fs::directory_iterator(dir.file("out0")))
    if (e.path().extension() == ".png") {
      EXPECT_EQ(read_file(e.path().string()), read_file(dir.file("out3/" + e.path().filename().string()))) << e.path();
    }
}

TEST(PipelinedWriter, WriteQueueOutOfRangeIsBadInput) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("out"), "--write-queue", "-1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--write-queue: expected 0 (write in the denoising thread) to 1024 images, got -1")) << r.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

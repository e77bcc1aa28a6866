#include "support/family_e2e.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "dpinfer/io/safetensors.h"
#include "support/image_compare.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace dpinfer::test {

using namespace std::chrono_literals;

void expect_png_matches_golden(const std::string& png_path, const std::string& golden_images, const std::string& name) {
  expect_pixels_match_golden(read_png(png_path).pixels, golden_images, name);
}

void expect_pixels_match_golden(const std::vector<uint8_t>& pixels, const std::string& golden_images,
                                const std::string& name) {
  SCOPED_TRACE(golden_images + ": " + name);
  auto golden = io::SafetensorsFile::open(golden_images);
  const io::TensorView* want = golden->find(name);
  ASSERT_NE(want, nullptr);
  ASSERT_EQ(want->nbytes, pixels.size());
  expect_within_rounding(pixels.data(), reinterpret_cast<const uint8_t*>(want->data), want->nbytes, name);
}

double mean_distance_from_golden(const std::vector<uint8_t>& pixels, const std::string& golden_images,
                                 const std::string& name) {
  auto golden = io::SafetensorsFile::open(golden_images);
  const io::TensorView* want = golden->find(name);
  if (!want || want->nbytes != pixels.size()) return 1e9;
  const auto* w = reinterpret_cast<const uint8_t*>(want->data);
  double sum = 0;
  for (size_t i = 0; i < pixels.size(); ++i) sum += std::abs(int(pixels[i]) - int(w[i]));
  return sum / static_cast<double>(pixels.size());
}

void expect_batch_and_rank_independence(const TempDir& dir, const std::vector<std::string>& args,
                                        const std::map<std::string, std::string>& env) {
  for (const auto& [out, batch] : std::vector<std::pair<std::string, std::string>>{{"alone", "1"}, {"batched", "3"}}) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", "--out", dir.file(out), "--batch-size", batch};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = run(argv, env, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::vector<std::string> launch = {DPINFER_BINARY, "launch", "--nproc-per-node", "3"};
  launch.insert(launch.end(), args.begin(), args.end());
  launch.insert(launch.end(), {"--out", dir.file("ranks"), "--batch-size", "3"});
  RunResult ranks = run(launch, env, 300s);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;

  const auto alone = png_pixels_in(dir.file("alone"));
  const auto batched = png_pixels_in(dir.file("batched"));
  const auto ranked = png_pixels_in(dir.file("ranks"));
  ASSERT_EQ(alone.size(), 3u);
  ASSERT_EQ(batched.size(), 3u);
  ASSERT_EQ(ranked.size(), 3u);
  for (const auto& [name, pixels] : alone) {
    // The same --batch-size cuts the same batches (plan/batches.h), whatever the ranks.
    EXPECT_EQ(ranked.at(name), batched.at(name)) << "3 ranks, --batch-size 3: " << name;
    expect_within_rounding(batched.at(name), pixels, "batch of 3: " + name);
  }
  // args[0] is the prompts file.
  RunResult status = run({DPINFER_BINARY, "status", dir.file("ranks"), "--prompts", args.at(0)}, env, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
}

namespace {

/// Every PNG of `dir`, by file name, as its bytes (pixels and metadata).
std::map<std::string, std::string> png_files_in(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".png") out[e.path().filename().string()] = read_file(e.path().string());
  return out;
}

}  // namespace

void expect_same_pngs_whatever_the_ranks(const TempDir& dir, const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env) {
  const auto command = [&](int nproc, const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> argv;
    if (nproc == 0)
      argv = {DPINFER_WORKER_BINARY, "generate"};
    else
      argv = {DPINFER_BINARY, "launch", "--nproc-per-node", std::to_string(nproc)};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--out", dir.file(out)});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  const auto run_ok = [&](const std::vector<std::string>& argv) {
    RunResult r = run(argv, env, 300s);
    std::string line;
    for (const std::string& a : argv) line += a + " ";
    ASSERT_EQ(r.exit_code, 0) << line << "\n" << r.err;
  };
  // One process, then 2 ranks (contiguous) and 3 (strided); nproc 0 is `dpinfer generate` alone. The
  // dynamic mode is the resume's, below.
  ASSERT_NO_FATAL_FAILURE(run_ok(command(0, "one", {})));
  const auto reference = png_files_in(dir.file("one"));
  ASSERT_GE(reference.size(), 3u);
  for (const auto& [nproc, mode] : std::vector<std::pair<int, std::string>>{{2, "contiguous"}, {3, "strided"}}) {
    const std::string out = std::to_string(nproc) + "-" + mode;
    ASSERT_NO_FATAL_FAILURE(run_ok(command(nproc, out, {"--shard-mode", mode})));
    EXPECT_EQ(png_files_in(dir.file(out)), reference) << nproc << " ranks, " << mode;
  }
  // Two outer shards into one folder.
  for (const char* shard : {"0/2", "1/2"}) ASSERT_NO_FATAL_FAILURE(run_ok(command(0, "shards", {"--shard", shard})));
  EXPECT_EQ(png_files_in(dir.file("shards")), reference) << "--shard 0/2 and 1/2";
  // What a preempted run leaves (writes are atomic: whole files and records, or none): the
  // 3-rank run less two images, one of them beside a batch-mate that stays; resumed on 2 ranks.
  std::filesystem::copy(dir.file("3-strided"), dir.file("resumed"), std::filesystem::copy_options::recursive);
  for (const char* gone : {"000001.png", "000004.png"}) std::filesystem::remove(dir.file("resumed/") + gone);
  ASSERT_NO_FATAL_FAILURE(run_ok(command(2, "resumed", {"--shard-mode", "dynamic"})));
  EXPECT_EQ(png_files_in(dir.file("resumed")), reference) << "resumed on 2 ranks, dynamic";
}

void expect_bf16_pngs_whatever_the_ranks(const TempDir& dir, const std::string& model,
                                         const std::vector<std::string>& extra,
                                         const std::map<std::string, std::string>& env) {
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red cube\"}\n"
             "{\"prompt\": \"an extremely detailed matte painting of a sprawling futuristic city built on the back of "
             "a giant turtle swimming through a sea of clouds at golden hour\", \"negative_prompt\": \"blurry\"}\n"
             "{\"prompt\": \"\"}\n"
             "{\"prompt\": \"a lighthouse at dusk\", \"num_images\": 2}\n");
  std::vector<std::string> args = {dir.file("p.jsonl"), "--model", model, "--dtype", "bf16", "--batch-size", "2",
                                   "--steps", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  expect_same_pngs_whatever_the_ranks(dir, args, env);
}

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

void copy_input_images(const TempDir& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  for (const auto& [from, to] : files)
    std::filesystem::copy_file(std::string(DPINFER_TEST_DATA_DIR) + "/input-images/" + from, dir.file(to));
}

}  // namespace dpinfer::test

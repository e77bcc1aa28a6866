#include "support/family_e2e.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "dpinfer/io/safetensors.h"
#include "support/image_compare.h"
#include "support/png_reader.h"
#include "support/subprocess.h"

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
    EXPECT_EQ(ranked.at(name), pixels) << "3 ranks (each a batch of one): " << name;
    expect_within_rounding(batched.at(name), pixels, "batch of 3: " + name);
  }
  // args[0] is the prompts file.
  RunResult status = run({DPINFER_BINARY, "status", dir.file("ranks"), "--prompts", args.at(0)}, env, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
}

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace dpinfer::test

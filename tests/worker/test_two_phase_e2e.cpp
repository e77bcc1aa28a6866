// Two-phase chunks (--encode-chunk, issue 26) through `dpinfer generate` and `dpinfer launch`: a run
// with the flag writes the pixels of a run without it, whatever the chunk size (one batch, a chunk
// that ends inside the run, the whole run), the ranks, the shard mode, and a resume of a run whose
// chunk was partly written when it stopped; run.json records the choice.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/image_compare.h"
#include "support/param_names.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

/// Seven items, one negative prompt repeated across batches (the cache's case), one line with two images.
void write_prompts(const TempDir& dir) {
  std::string lines;
  for (const json& line : {json{{"prompt", "a photograph of an astronaut riding a horse"},
                                {"negative_prompt", "blurry, low quality"}},
                           json{{"prompt", "a red cube"}, {"negative_prompt", "blurry, low quality"}},
                           json{{"prompt", "a red cube"}, {"num_images", 2}},
                           json{{"prompt", "a lighthouse at dusk, oil painting"}, {"negative_prompt", "blurry, low quality"}},
                           json{{"prompt", ""}, {"negative_prompt", "text"}},
                           json{{"prompt", "a cat"}, {"negative_prompt", "blurry, low quality"}}})
    lines += line.dump() + "\n";
  write_file(dir.file("p.jsonl"), lines);
}

class TwoPhaseE2e : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoPhaseE2e, TheChunkFlagWritesThePixelsOfARunWithoutIt) {
  TempDir dir;
  write_prompts(dir);
  std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kPipelines + GetParam(), "--steps", "2",
                                     "--width", "32", "--height", "32", "--guidance-scale", "4", "--batch-size", "2"};
  // FLUX.1 encodes the negative prompts for true CFG only.
  if (GetParam() == "tiny-flux-dev") common.insert(common.end(), {"--set", "true_cfg_scale=2"});
  const auto generate = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", "--out", dir.file(out)};
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    RunResult r = run(argv, kEnv, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  ASSERT_NO_FATAL_FAILURE(generate("plain", {}));
  const auto reference = png_pixels_in(dir.file("plain"));
  ASSERT_EQ(reference.size(), 7u);
  // One batch a chunk, chunks of two batches (the last one short), the whole run in one chunk.
  for (const char* chunk : {"1", "4", "64"}) {
    const std::string out = std::string("chunk-") + chunk;
    ASSERT_NO_FATAL_FAILURE(generate(out, {"--encode-chunk", chunk}));
    EXPECT_EQ(png_pixels_in(dir.file(out)), reference) << "--encode-chunk " << chunk;
    const json run_json = json::parse(read_file(dir.file(out + "/run.json")));
    EXPECT_EQ(run_json["options"]["encode_chunk"], std::stoi(chunk));
  }
  // Ranks, shard modes, outer shards and a resume of a partly written run (dynamic), all with chunks
  // of two batches: the same files, and so the pixels of the run without chunks.
  std::vector<std::string> chunked = common;
  chunked.insert(chunked.end(), {"--encode-chunk", "4"});
  ASSERT_NO_FATAL_FAILURE(expect_same_pngs_whatever_the_ranks(dir, chunked, kEnv));
  EXPECT_EQ(png_pixels_in(dir.file("one")), reference) << "expect_same_pngs_whatever_the_ranks' first run";
}

INSTANTIATE_TEST_SUITE_P(Families, TwoPhaseE2e, ::testing::Values("tiny-sd1", "tiny-flux-dev"),
                         dpinfer::test::FixtureParamName());

// A SIGTERM while a chunk is half made (its prompts encoded, its first batch written), then a run
// with the same flag: the resumed run makes the rest of the chunk and after, and every image is
// the one a run without chunks makes.
TEST(TwoPhaseE2eStop, AChunkPartlyMadeBeforeASigtermIsFinishedByTheNextRun) {
  TempDir dir;
  write_prompts(dir);
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--model", kPipelines + "tiny-sd1", "--steps", "100",
                                           "--width", "32", "--height", "32", "--guidance-scale", "4"};
  const auto argv = [&](const std::string& out, bool chunked) {
    std::vector<std::string> a = {DPINFER_WORKER_BINARY, "generate", "--out", dir.file(out)};
    a.insert(a.end(), common.begin(), common.end());
    if (chunked) a.insert(a.end(), {"--encode-chunk", "4", "--stop-timeout", "0"});
    return a;
  };
  RunResult plain = run(argv("plain", false), kEnv, 300s);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  Child worker(argv("stopped", true), kEnv);
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(dir.file("stopped/000000.png")); }, 120s))
      << worker.err_so_far();
  worker.signal(SIGTERM);
  RunResult stopped = worker.wait(60s);
  EXPECT_EQ(stopped.exit_code, 143) << stopped.err;
  const size_t made = png_pixels_in(dir.file("stopped")).size();
  EXPECT_GE(made, 1u);
  EXPECT_LT(made, 4u) << "the first chunk was not finished when the SIGTERM came";
  RunResult resumed = run(argv("stopped", true), kEnv, 300s);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("skipped " + std::to_string(made) + " item(s)"), std::string::npos) << resumed.err;
  EXPECT_EQ(png_pixels_in(dir.file("stopped")), png_pixels_in(dir.file("plain")));
}

TEST(TwoPhaseE2eBadInput, ANegativeChunkIsRefusedInOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--encode-chunk", "-1", "--out",
                     dir.file("out")},
                    kEnv, 60s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--encode-chunk: expected 0 (off) to 1000000 items, got -1"), std::string::npos) << r.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

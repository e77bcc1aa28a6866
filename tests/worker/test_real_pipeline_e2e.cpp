// The worker end to end with the real pipeline on the tiny SD1 fixture: the same
// images whatever the world size, shard mode and restarts, and a pinned bound on
// what batching may change.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <thread>
#include <map>

#include <nlohmann/json.hpp>

#include "support/family_e2e.h"
#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kModel = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd1";

// On the CPU an image is bit-identical across world sizes at a fixed intra-op
// thread count (GEMM reductions split by thread); the launcher sets one thread
// per worker, so the single-process reference does too.
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

std::map<std::string, std::vector<uint8_t>> images(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".png") out[e.path().filename().string()] = read_png(e.path().string()).pixels;
  return out;
}

std::vector<std::string> generate_args(const TempDir& dir, const std::string& out) {
  return {dir.file("p.jsonl"), "--model", kModel, "--out", out, "--steps", "4", "--width", "32", "--height", "32"};
}

void write_prompts(const TempDir& dir) {
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a red circle\", \"num_images\": 2}\n"
             "{\"prompt\": \"a blue square on a white background\", \"negative_prompt\": \"blurry\"}\n"
             "{\"prompt\": \"富士山\", \"seed\": 1234}\n"
             "{\"prompt\": \"a green triangle\", \"guidance_scale\": 1.0}\n");
}


TEST(RealPipelineE2E, OneProcessAndThreeProcessesMakeBitIdenticalImages) {
  TempDir dir;
  write_prompts(dir);
  std::vector<std::string> solo = {DPINFER_WORKER_BINARY, "generate"};
  for (auto& a : generate_args(dir, dir.file("one"))) solo.push_back(a);
  RunResult r1 = run(solo, kEnv, 300s);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  auto reference = images(dir.file("one"));
  ASSERT_EQ(reference.size(), 5u);

  // The PROMPTS form of `dpinfer launch`: it runs dpinfer-worker itself.
  for (const char* mode : {"contiguous", "dynamic"}) {
    std::string out = dir.file(std::string("three-") + mode);
    std::vector<std::string> argv = {DPINFER_BINARY, "launch", "--nproc-per-node", "3"};
    for (auto& a : generate_args(dir, out)) argv.push_back(a);
    argv.insert(argv.end(), {"--shard-mode", mode});
    RunResult r3 = run(argv, kEnv, 300s);
    ASSERT_EQ(r3.exit_code, 0) << r3.err;
    EXPECT_EQ(images(out), reference) << mode;
  }
}

TEST(RealPipelineE2E, BatchingChangesPixelsByAtMostOneLevel) {
  TempDir dir;
  write_prompts(dir);
  // Same size/steps/guidance items batch together; guidance differs for the last one.
  std::map<std::string, std::vector<uint8_t>> by_batch[2];
  const char* sizes[2] = {"1", "4"};
  for (int k = 0; k < 2; ++k) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate"};
    for (auto& a : generate_args(dir, dir.file(std::string("b") + sizes[k]))) argv.push_back(a);
    argv.insert(argv.end(), {"--batch-size", sizes[k]});
    RunResult r = run(argv, kEnv, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    by_batch[k] = images(dir.file(std::string("b") + sizes[k]));
  }
  ASSERT_EQ(by_batch[0].size(), by_batch[1].size());
  size_t exact = 0, total = 0;
  for (const auto& [name, px] : by_batch[0]) {
    const auto& other = by_batch[1].at(name);
    ASSERT_EQ(px.size(), other.size());
    for (size_t i = 0; i < px.size(); ++i) {
      int d = std::abs(int(px[i]) - int(other[i]));
      EXPECT_LE(d, 1) << name << " byte " << i;
      exact += d == 0;
      ++total;
    }
  }
  EXPECT_GE(static_cast<double>(exact) / static_cast<double>(total), 0.99);
}

TEST(RealPipelineE2E, AMissingModelIsBadInputWithOneLine) {
  TempDir dir;
  write_prompts(dir);
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.jsonl"), "--model", dir.file("nope"), "--out",
                     dir.file("out")},
                    kEnv, 120s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

// The real pipeline honours the stop between denoising steps (TextToImage's cancel
// check): with --stop-timeout 0 a SIGTERM ends a long batch at once.
TEST(RealPipelineE2E, SigtermWithStopTimeout0EndsALongBatchBetweenSteps) {
  TempDir dir;
  write_prompts(dir);
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate"};
  for (auto& a : generate_args(dir, dir.file("out"))) argv.push_back(a);
  // 4 of the 5 images (those with CFG) of 32x32 at 400 steps in one batch: several seconds.
  argv.insert(argv.end(), {"--steps", "400", "--batch-size", "8", "--stop-timeout", "0"});
  Child worker(argv, kEnv);
  ASSERT_TRUE(wait_until([&] { return contains(worker.err_so_far(), "on 1 rank(s)"); }, 120s))
      << worker.err_so_far();
  std::this_thread::sleep_for(300ms);
  auto t0 = std::chrono::steady_clock::now();
  worker.signal(SIGTERM);
  RunResult r = worker.wait(60s);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_LT(took, 2.0) << r.err;
  EXPECT_TRUE(contains(r.err, "abandoned a batch of 4 item(s)")) << "the 4 items with CFG: " << r.err;
  EXPECT_TRUE(images(dir.file("out")).empty());
}

// Issue 11: a model found in the Hugging Face cache records the snapshot's commit, in
// run.json and in every image's record, beside the hub id it was given as.
TEST(RealPipelineE2E, AHubModelRecordsItsSnapshotCommit) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red circle\n");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const std::string repo = dir.file("hub/models--org--tiny-sd1");
  fs::create_directories(repo + "/refs");
  write_file(repo + "/refs/main", commit + "\n");
  fs::create_directories(repo + "/snapshots");
  fs::copy(kModel, repo + "/snapshots/" + commit, fs::copy_options::recursive);
  std::map<std::string, std::string> env = kEnv;
  env["HF_HUB_CACHE"] = dir.file("hub");
  RunResult r = run({DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", "org/tiny-sd1", "--steps", "2",
                     "--width", "32", "--height", "32", "--out", dir.file("out")},
                    env, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run_json = nlohmann::json::parse(read_file(dir.file("out/run.json")));
  EXPECT_EQ(run_json["pipeline"]["model"], "org/tiny-sd1");
  EXPECT_EQ(run_json["pipeline"]["model_revision"], commit);
  const auto row = read_jsonl(dir.file("out/metadata.jsonl")).at(0);
  EXPECT_EQ(row["model"], "org/tiny-sd1");
  EXPECT_EQ(row["model_revision"], commit);
}

// --lora org/name: the LoRA from the hub cache, offline, as diffusers' load_lora_weights("org/name")
// finds it (a snapshot's file is a link to a blob); the image is the one the file's path gives, and
// the record names the snapshot's file. A prompts line may name one too.
TEST(RealPipelineE2E, ALoraByHubIdComesFromTheHubCache) {
  TempDir dir;
  const std::string lora = std::string(DPINFER_TEST_DATA_DIR) + "/loras/sd1-peft.safetensors";
  const std::string repo = dir.file("hub/models--someone--style-lora");
  fs::create_directories(repo + "/refs");
  fs::create_directories(repo + "/blobs");
  fs::create_directories(repo + "/snapshots/0123abc");
  write_file(repo + "/refs/main", "0123abc");
  fs::copy_file(lora, repo + "/blobs/f00d");
  fs::create_symlink("../../blobs/f00d", repo + "/snapshots/0123abc/style.safetensors");
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red circle\", \"loras\": [\"someone/style-lora:0.5\"]}\n");
  auto env = kEnv;
  env["HF_HUB_CACHE"] = dir.file("hub");
  const auto worker = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate"};
    for (auto& a : generate_args(dir, out)) argv.push_back(a);
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, env, 300s);
  };
  RunResult by_id = worker(dir.file("by-id"), {});
  ASSERT_EQ(by_id.exit_code, 0) << by_id.err;
  auto meta = read_jsonl(dir.file("by-id/metadata.jsonl"));
  ASSERT_EQ(meta.size(), 1u);
  EXPECT_EQ(meta[0]["lora_paths"], nlohmann::json::array({repo + "/snapshots/0123abc/style.safetensors"})) << meta[0];
  EXPECT_EQ(meta[0]["loras"][0]["name"], "style");
  EXPECT_EQ(meta[0]["loras"][0]["scale"], 0.5);

  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red circle\", \"loras\": [\"" + lora + ":0.5\"]}\n");
  RunResult by_path = worker(dir.file("by-path"), {});
  ASSERT_EQ(by_path.exit_code, 0) << by_path.err;
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a red circle\"}\n");
  RunResult none = worker(dir.file("none"), {});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(images(dir.file("by-id")), images(dir.file("by-path")));
  EXPECT_NE(images(dir.file("by-id")), images(dir.file("none"))) << "the LoRA changes the image";

  RunResult missing = worker(dir.file("missing"), {"--lora", "someone/other"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_TRUE(contains(missing.err, "--lora: LoRA 'someone/other' is neither a file (")) << missing.err;
  EXPECT_TRUE(contains(missing.err, "run `hf download someone/other` first, or pass the LoRA file")) << missing.err;
}

// Issue 34: in bf16 at --batch-size 2, the PNGs of one process, of 2 and 3 ranks in each mode, of
// two outer shards and of a resumed run are byte-identical (the batches are the prompts file's).
TEST(RealPipelineE2E, Bf16PngsAreByteIdenticalWhateverTheRanksShardsOrResume) {
  TempDir dir;
  dpinfer::test::expect_bf16_pngs_whatever_the_ranks(dir, kModel, {"--width", "32", "--height", "32"}, kEnv);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

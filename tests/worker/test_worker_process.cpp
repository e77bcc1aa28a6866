// `dpinfer generate` as real processes: alone, under `dpinfer launch` with several
// ranks, killed and resumed. The pipeline is the test double of
// tests/support/fake_pipeline.cpp, whose pixels are a hash of the request, so any
// mix-up of prompts, seeds or indices shows.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/imagefolder.h"
#include "support/jpeg_reader.h"
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

RunResult generate(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {kWorker, "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  env.emplace("CUDA_VISIBLE_DEVICES", "");
  return run(argv, env, 120s);
}

RunResult launch_generate(int nproc, const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {dpinfer_binary(), "launch", "--nproc-per-node", std::to_string(nproc), "--",
                                   kWorker, "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  env.emplace("CUDA_VISIBLE_DEVICES", "");
  return run(argv, env, 120s);
}

/// Every file under `dir` (its subdirectories too), relative to it.
std::set<std::string> files_under(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.insert(e.path().lexically_relative(dir).generic_string());
  return out;
}


TEST(WorkerProcess, SingleProcessWritesEveryImageManifestAndRunJson) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(5));
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("out"), "--seed", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto meta = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(meta.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(meta[i]["index"], i);
    EXPECT_EQ(meta[i]["file_name"], "00000" + std::to_string(i) + ".png");
    EXPECT_EQ(meta[i]["prompt"], "prompt number " + std::to_string(i));
    EXPECT_EQ(meta[i]["seed"], 100 + i);
    EXPECT_EQ(meta[i]["status"], "ok");
    EXPECT_EQ(meta[i]["rank"], 0);
    // Issue 11, item 11: imagefolder loads the pictures (its "image" column is not shadowed).
    EXPECT_EQ(meta[i]["image_index"], 0);
    EXPECT_EQ(imagefolder_clashes(meta[i]), std::vector<std::string>{}) << meta[i].dump();
    for (const char* k : {"negative_prompt", "steps", "guidance_scale", "width", "height", "scheduler", "model", "seconds"})
      EXPECT_TRUE(meta[i].contains(k)) << k;
  }
  auto run_json = nlohmann::json::parse(read_file(dir.file("out/run.json")));
  EXPECT_EQ(run_json["world_size"], 1);
  EXPECT_EQ(run_json["summary"]["generated"], 5);
  EXPECT_EQ(run_json["options"]["seed"], 100);
  EXPECT_TRUE(run_json["options"]["steps"].is_null()) << "not given";
  EXPECT_EQ(run_json["item_defaults"]["steps"], 4) << "resolved: the model's default";
  EXPECT_EQ(run_json["item_defaults"]["width"], 16);
  EXPECT_EQ(run_json["prompts_path"], dir.file("p.txt"));
  DecodedPng png = read_png(dir.file("out/000003.png"));
  EXPECT_EQ(png.width, 16);
  EXPECT_EQ(png.height, 8);
  EXPECT_EQ(png.channels, 3);
  EXPECT_EQ(png.texts["parameters"],
            "prompt number 3\nSteps: 4, Sampler: Fake, CFG scale: 7.5, Seed: 103, Size: 16x8, Model: fake-model");
  auto embedded = nlohmann::json::parse(png.texts["dpinfer"]);
  EXPECT_EQ(embedded["seed"], 103);
  EXPECT_EQ(embedded["index"], 3);
}

TEST(WorkerProcess, NonAsciiPromptAndNegativePromptRoundTripInPngMetadata) {
  TempDir dir;
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"富士山の夕焼け, café\", \"negative_prompt\": \"blurry\", \"seed\": 9, \"steps\": 3}\n");
  RunResult r = generate({dir.file("p.jsonl"), "--out", dir.file("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedPng png = read_png(dir.file("out/000000.png"));
  EXPECT_TRUE(png.text_is_itxt["parameters"]);
  EXPECT_EQ(png.texts["parameters"],
            "富士山の夕焼け, café\nNegative prompt: blurry\nSteps: 3, Sampler: Fake, CFG scale: 7.5, Seed: 9, Size: "
            "16x8, Model: fake-model");
}

// clip_skip and guidance_rescale change the image, so every record carries them, and
// the infotext says "Clip skip" as AUTOMATIC1111 counts it (diffusers' 1 is its 2).
TEST(WorkerProcess, ClipSkipAndGuidanceRescaleAreRecordedWithEveryImage) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a prompt\n");
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("out"), "--clip-skip", "1", "--guidance-rescale", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedPng png = read_png(dir.file("out/000000.png"));
  EXPECT_EQ(png.texts["parameters"],
            "a prompt\nSteps: 4, Sampler: Fake, CFG scale: 7.5, Seed: 0, Size: 16x8, Model: fake-model, Clip skip: 2, "
            "CFG Rescale phi: 0.5");
  auto embedded = nlohmann::json::parse(png.texts["dpinfer"]);
  EXPECT_EQ(embedded["clip_skip"], 1);
  EXPECT_EQ(embedded["guidance_rescale"], 0.5);
  auto row = read_jsonl(dir.file("out/metadata.jsonl")).at(0);
  EXPECT_EQ(row["clip_skip"], 1);
  EXPECT_EQ(row["guidance_rescale"], 0.5);
  // Resuming with another clip_skip would mix two kinds of images.
  RunResult other = generate({dir.file("p.txt"), "--out", dir.file("out")});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_TRUE(contains(other.err, "made with clip_skip 1")) << other.err;
}

TEST(WorkerProcess, ImagesDoNotDependOnWorldSizeShardModeOrBatchSize) {
  TempDir dir;
  // Mixed sizes and steps, several images per prompt, per-line seeds.
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a\", \"num_images\": 3}\n{\"prompt\": \"b\", \"seed\": 77, \"num_images\": 2}\n"
             "{\"prompt\": \"c\", \"width\": 24, \"height\": 16}\n{\"prompt\": \"d\", \"steps\": 2}\n"
             "{\"prompt\": \"e\"}\n{\"prompt\": \"f\", \"num_images\": 4}\n");
  ASSERT_EQ(generate({dir.file("p.jsonl"), "--out", dir.file("one")}).exit_code, 0);
  auto reference = png_pixels(dir.file("one"));
  ASSERT_EQ(reference.size(), 12u);
  int run_id = 0;
  for (const char* mode : {"contiguous", "strided", "dynamic"}) {
    for (const char* batch : {"1", "3"}) {
      std::string out = dir.file("run" + std::to_string(run_id++));
      RunResult r = launch_generate(3, {dir.file("p.jsonl"), "--out", out, "--shard-mode", mode, "--batch-size", batch});
      ASSERT_EQ(r.exit_code, 0) << mode << " " << batch << ": " << r.err;
      EXPECT_EQ(png_pixels(out), reference) << mode << " batch " << batch;
      auto counts = ok_counts(out);
      ASSERT_EQ(counts.size(), 12u) << mode;
      for (auto [index, n] : counts) EXPECT_EQ(n, 1) << "item " << index << " generated once in " << mode;
      EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").size(), 12u);
    }
  }
}

namespace {

/// The batches the fake pipeline was given (DPINFER_FAKE_BATCH_LOG), one "prompt#seed ..." line each.
std::multiset<std::string> logged_batches(const std::string& path) {
  std::multiset<std::string> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) out.insert(line);
  return out;
}

}  // namespace

// Issue 34: the batches are cut from the prompts file alone and shared out whole, so an item's
// batch-mates (whose number sets the kernels' shapes, and so the rounding in bf16) are the same
// in every run: alone, on 2 or 3 ranks in each mode, in outer shards, and when a run killed by
// SIGKILL is resumed on another world size (a batch with items left is made whole again, its
// made items beside the missing ones, and only those are written).
TEST(WorkerProcess, AnItemsBatchMatesDoNotDependOnWorldSizeModeShardsOrRestarts) {
  TempDir dir;
  // Groups (lines that set the same batch fields): a,b (4 items) | c (steps 2) | d,e,f (7 items).
  write_file(dir.file("p.jsonl"),
             "{\"prompt\": \"a\", \"num_images\": 3}\n{\"prompt\": \"b\", \"seed\": 77}\n"
             "{\"prompt\": \"c\", \"steps\": 2}\n{\"prompt\": \"d\", \"num_images\": 2}\n"
             "{\"prompt\": \"e\"}\n{\"prompt\": \"f\", \"num_images\": 4}\n");
  const std::vector<std::string> common = {dir.file("p.jsonl"), "--batch-size", "3"};
  const auto with = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> args = common;
    args.insert(args.end(), {"--out", out});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ASSERT_EQ(generate(with({}, dir.file("one")), {{"DPINFER_FAKE_BATCH_LOG", dir.file("one.log")}}).exit_code, 0);
  const auto reference_images = png_pixels(dir.file("one"));
  const std::multiset<std::string> reference = logged_batches(dir.file("one.log"));
  ASSERT_EQ(reference_images.size(), 12u);
  // 3 items of a, then b alone (its group has 4), c alone, then d,d,e | f,f,f | f.
  EXPECT_EQ(reference, (std::multiset<std::string>{"a#0 a#1 a#2", "b#77", "c#4", "d#5 d#6 e#7", "f#8 f#9 f#10",
                                                   "f#11"}));
  int run_id = 0;
  for (const auto& [nproc, mode] : std::vector<std::pair<int, std::string>>{
           {2, "contiguous"}, {3, "contiguous"}, {2, "strided"}, {3, "strided"}, {2, "dynamic"}, {3, "dynamic"}}) {
    const std::string out = dir.file("run" + std::to_string(run_id)), log = out + ".log";
    ++run_id;
    RunResult r = launch_generate(nproc, with({"--shard-mode", mode}, out), {{"DPINFER_FAKE_BATCH_LOG", log}});
    ASSERT_EQ(r.exit_code, 0) << nproc << " " << mode << ": " << r.err;
    EXPECT_EQ(logged_batches(log), reference) << nproc << " ranks, " << mode;
    EXPECT_EQ(png_pixels(out), reference_images) << nproc << " ranks, " << mode;
  }
  // Outer shards: each a run of whole batches (3 shards of 6 batches: 2 each).
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(generate(with({"--shard", std::to_string(i) + "/3"}, dir.file("shards")),
                       {{"DPINFER_FAKE_BATCH_LOG", dir.file("shards.log")}})
                  .exit_code,
              0);
  EXPECT_EQ(logged_batches(dir.file("shards.log")), reference);
  EXPECT_EQ(png_pixels(dir.file("shards")), reference_images);
  RunResult status = run({dpinfer_binary(), "status", dir.file("shards"), "--shard", "1/3"}, {}, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
  EXPECT_NE(status.out.find("total: 4/4 done"), std::string::npos) << status.out;  // b, c | d,d,e

  // Killed by SIGKILL mid-run on 2 ranks, resumed on 3: every batch the resume makes is one of the
  // reference batches, whole, and each item is written once.
  const int n = 30;
  write_file(dir.file("long.txt"), numbered_prompts(n));
  const std::string out = dir.file("killed");
  const std::vector<std::string> args = {dir.file("long.txt"), "--out", out, "--batch-size", "4", "--shard-mode",
                                         "dynamic"};
  ASSERT_EQ(generate({dir.file("long.txt"), "--out", dir.file("long-one"), "--batch-size", "4"},
                     {{"DPINFER_FAKE_BATCH_LOG", dir.file("long-one.log")}})
                .exit_code,
            0);
  const auto long_reference = logged_batches(dir.file("long-one.log"));
  {
    std::vector<std::string> argv = {dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate"};
    argv.insert(argv.end(), args.begin(), args.end());
    Child launcher(argv, {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "100"},
                          {"DPINFER_FAKE_BATCH_LOG", dir.file("killed-first.log")}});
    ASSERT_TRUE(wait_until([&] { return fs::exists(out) && png_pixels(out).size() >= 6; }, 60s)) << launcher.err_so_far();
    launcher.signal(SIGKILL);
    launcher.wait(10s);
  }
  const size_t before = png_pixels(out).size();
  EXPECT_LT(before, static_cast<size_t>(n)) << "the kill came mid-run";
  std::this_thread::sleep_for(300ms);  // the keepers SIGKILL the workers
  std::vector<std::string> resume = args;
  resume.back() = "strided";
  RunResult r = launch_generate(3, resume, {{"DPINFER_FAKE_BATCH_LOG", dir.file("killed-resume.log")}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto resumed = logged_batches(dir.file("killed-resume.log"));
  EXPECT_FALSE(resumed.empty());
  for (const std::string& batch : resumed) EXPECT_EQ(long_reference.count(batch), 1u) << "not a batch of the plan: " << batch;
  for (const std::string& batch : logged_batches(dir.file("killed-first.log")))
    EXPECT_EQ(long_reference.count(batch), 1u) << batch;
  EXPECT_EQ(png_pixels(out), png_pixels(dir.file("long-one")));
  auto counts = ok_counts(out);
  ASSERT_EQ(counts.size(), static_cast<size_t>(n));
  for (auto [index, c] : counts) EXPECT_EQ(c, 1) << "item " << index << " recorded once";
}

// --num-images N (diffusers' num_images_per_prompt) for a .txt file: the items, seeds and
// pixels of the same file in JSONL with "num_images": N on each line; a line's own wins;
// `dpinfer status` takes the count from run.json when not told; --config takes it too.
TEST(WorkerProcess, NumImagesGivesEachLineThatSetsNoneItsImages) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a\nb\n");
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"a\", \"num_images\": 3}\n{\"prompt\": \"b\", \"num_images\": 3}\n");
  ASSERT_EQ(generate({dir.file("p.jsonl"), "--out", dir.file("jsonl"), "--seed", "5"}).exit_code, 0);
  RunResult r = launch_generate(2, {dir.file("p.txt"), "--out", dir.file("txt"), "--seed", "5", "--num-images", "3",
                                    "--batch-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(png_pixels(dir.file("txt")), png_pixels(dir.file("jsonl")));
  const auto rows = read_jsonl(dir.file("txt/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(rows[i]["prompt"], i < 3 ? "a" : "b");
    EXPECT_EQ(rows[i]["seed"], 5 + i);
    EXPECT_EQ(rows[i]["image_index"], i % 3);
    EXPECT_EQ(rows[i]["line"], i < 3 ? 1 : 2);
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(dir.file("txt/run.json")))["options"]["num_images"], 3);

  // status counts 6 items from run.json; told another count, it says which option may differ.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {dpinfer_binary(), "status", dir.file("txt"), "--prompts", dir.file("p.txt")},
           {dpinfer_binary(), "status", dir.file("txt")}}) {  // the prompts file too from run.json
    RunResult st = run(args);
    EXPECT_EQ(st.exit_code, 0) << st.err;
    EXPECT_TRUE(contains(st.out, "total: 6/6 done, 0 failed, 0 missing")) << st.out;
  }
  RunResult other = run({dpinfer_binary(), "status", dir.file("txt"), "--prompts", dir.file("p.txt"), "--num-images", "2"});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_TRUE(contains(other.err, "or with another --num-images than 2?")) << other.err;

  // A line's num_images wins; --config {"num_images": 2} and the diffusers spelling both work.
  write_file(dir.file("m.jsonl"), "{\"prompt\": \"a\", \"num_images\": 1}\n{\"prompt\": \"b\"}\n");
  write_file(dir.file("c.json"), "{\"num_images\": 2}");
  ASSERT_EQ(generate({dir.file("m.jsonl"), "--out", dir.file("mixed"), "--config", dir.file("c.json")}).exit_code, 0);
  EXPECT_EQ(read_jsonl(dir.file("mixed/metadata.jsonl")).size(), 3u);
  ASSERT_EQ(generate({dir.file("m.jsonl"), "--out", dir.file("alias"), "--num-images-per-prompt", "2"}).exit_code, 0);
  EXPECT_EQ(png_pixels(dir.file("alias")), png_pixels(dir.file("mixed")));

  for (const char* bad : {"0", "100001"}) {
    RunResult b = generate({dir.file("p.txt"), "--out", dir.file("bad"), "--num-images", bad});
    EXPECT_EQ(b.exit_code, 2) << b.err;
    EXPECT_TRUE(contains(b.err, std::string("--num-images: expected 1..100000 images per prompt, got ") + bad)) << b.err;
  }
}

TEST(WorkerProcess, ResumeSkipsFinishedItemsAndOverwriteRedoesThem) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(4));
  ASSERT_EQ(generate({dir.file("p.txt"), "--out", dir.file("out")}).exit_code, 0);
  RunResult again = generate({dir.file("p.txt"), "--out", dir.file("out")});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_TRUE(contains(again.err, "skipped 4 item(s)")) << again.err;
  EXPECT_EQ(ok_counts(dir.file("out"))[0], 1);
  RunResult redo = generate({dir.file("p.txt"), "--out", dir.file("out"), "--overwrite"});
  EXPECT_EQ(redo.exit_code, 0);
  EXPECT_EQ(ok_counts(dir.file("out"))[0], 2);
  EXPECT_EQ(read_jsonl(dir.file("out/metadata.jsonl")).size(), 4u) << "one row per item even after a rerun";
}

// A kill between a PNG's rename and its manifest line leaves a PNG that no manifest
// records: resume makes it again, so that metadata.jsonl gets its row.
TEST(WorkerProcess, APngThatNoManifestRecordsIsMadeAgain) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(4));
  std::string out = dir.file("out");
  ASSERT_EQ(generate({dir.file("p.txt"), "--out", out}).exit_code, 0);
  std::string kept;
  for (const auto& rec : read_jsonl(out + "/manifest.rank0.jsonl"))
    if (rec["index"] != 2) kept += rec.dump() + "\n";
  write_file(out + "/manifest.rank0.jsonl", kept);
  RunResult again = generate({dir.file("p.txt"), "--out", out});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "000002.png exists but no manifest records it as made")) << again.err;
  EXPECT_TRUE(contains(again.err, "done: 1 generated, 3 skipped")) << again.err;
  auto counts = ok_counts(out);
  ASSERT_EQ(counts.size(), 4u);
  for (auto [index, c] : counts) EXPECT_EQ(c, 1) << "item " << index;
  EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").size(), 4u);
}

// Resuming into a directory that holds another run's images (other prompts, seed,
// steps, ...) would mix the two silently: it is bad input, unless --overwrite.
TEST(WorkerProcess, ResumingWithOtherOptionsIsRefusedUnlessOverwrite) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(3));
  std::string out = dir.file("out");
  ASSERT_EQ(generate({dir.file("p.txt"), "--out", out}).exit_code, 0);
  RunResult seed = generate({dir.file("p.txt"), "--out", out, "--seed", "7"});
  EXPECT_EQ(seed.exit_code, 2) << seed.err;
  EXPECT_TRUE(contains(seed.err, "already holds item 0 (000000.png) made with seed 0 (manifest.rank0.jsonl), but "
                                 "this run makes it with seed 7")) << seed.err;
  write_file(dir.file("q.txt"), "another prompt\n");
  RunResult other = generate({dir.file("q.txt"), "--out", out});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_TRUE(contains(other.err, "made with prompt \"prompt number 0\"")) << other.err;
  RunResult overwrite = generate({dir.file("p.txt"), "--out", out, "--seed", "7", "--overwrite"});
  EXPECT_EQ(overwrite.exit_code, 0) << overwrite.err;
  for (const auto& rec : read_jsonl(out + "/metadata.jsonl")) EXPECT_EQ(rec["seed"].get<int>(), 7 + rec["index"].get<int>());
}

namespace {

/// kill -9 of a 2-rank run of 30 items mid-run, then the same command again: every item
/// made exactly once, no temporary left. `layout` adds options (--files-per-dir).
void kill_minus_9_then_resume(const std::vector<std::string>& layout) {
  TempDir dir;
  const int n = 30;
  write_file(dir.file("p.txt"), numbered_prompts(n));
  std::string out = dir.file("out");
  std::vector<std::string> args = {dir.file("p.txt"), "--out", out, "--shard-mode", "dynamic"};
  args.insert(args.end(), layout.begin(), layout.end());
  {
    std::vector<std::string> argv = {dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate"};
    argv.insert(argv.end(), args.begin(), args.end());
    Child launcher(argv, {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "60"}});
    ASSERT_TRUE(wait_until([&] { return fs::exists(out) && png_pixels(out).size() >= 6; }, 60s)) << launcher.err_so_far();
    launcher.signal(SIGKILL);
    launcher.wait(10s);
  }
  size_t before = png_pixels(out).size();
  EXPECT_LT(before, static_cast<size_t>(n)) << "the kill came mid-run";
  // The keepers SIGKILL the workers; give them a moment to go.
  std::this_thread::sleep_for(300ms);
  RunResult r = launch_generate(2, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto counts = ok_counts(out);
  ASSERT_EQ(counts.size(), static_cast<size_t>(n));
  for (auto [index, c] : counts) EXPECT_EQ(c, 1) << "item " << index;
  EXPECT_EQ(png_pixels(out).size(), static_cast<size_t>(n));
  for (const std::string& f : files_under(out)) EXPECT_EQ(f.find(".dpinfer-tmp"), std::string::npos) << f;
  auto meta = read_jsonl(out + "/metadata.jsonl");
  ASSERT_EQ(meta.size(), static_cast<size_t>(n));
  for (const auto& row : meta) EXPECT_TRUE(fs::exists(out + "/" + row["file_name"].get<std::string>())) << row.dump();
}

}  // namespace

TEST(WorkerProcess, KillMinus9MidRunThenResumeMakesEveryItemExactlyOnce) { kill_minus_9_then_resume({}); }

TEST(WorkerProcess, KillMinus9MidRunThenResumeWithFilesPerDir) { kill_minus_9_then_resume({"--files-per-dir", "4"}); }

// --files-per-dir N: item i in OUT/<i / N>/, records naming that relative path, resumed like the
// flat layout; a resume with another N, or flat, is refused (the directory would hold both).
TEST(WorkerProcess, FilesPerDirWritesNumberedSubdirectoriesAndResumesOnlyInTheirLayout) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(10));
  const std::string out = dir.file("out");
  const std::vector<std::string> base = {dir.file("p.txt"), "--out", out};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  RunResult r = launch_generate(2, with({"--files-per-dir", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RunResult flat = generate({dir.file("p.txt"), "--out", dir.file("flat")});
  ASSERT_EQ(flat.exit_code, 0) << flat.err;

  // 3 + 3 + 3 + 1 images, nothing else in the subdirectories, and none at the top level.
  std::set<std::string> expected = {"run.json", "metadata.jsonl", "failures.jsonl", "manifest.rank0.jsonl",
                                    "manifest.rank1.jsonl"};
  for (int i = 0; i < 10; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "%05d/%06d.png", i / 3, i);
    expected.insert(name);
  }
  std::set<std::string> found = files_under(out);
  found.erase("hashes.json");  // written only when there is something to hash
  EXPECT_EQ(found, expected);
  std::set<std::string> dirs;
  for (const auto& e : fs::directory_iterator(out))
    if (e.is_directory()) dirs.insert(e.path().filename().string());
  EXPECT_EQ(dirs, (std::set<std::string>{"00000", "00001", "00002", "00003"}));

  // Records and metadata.jsonl (sorted by index) name the relative paths; the pixels are the flat run's.
  auto meta = read_jsonl(out + "/metadata.jsonl");
  ASSERT_EQ(meta.size(), 10u);
  const auto flat_images = png_pixels(dir.file("flat"));
  for (int i = 0; i < 10; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "%05d/%06d.png", i / 3, i);
    EXPECT_EQ(meta[i]["index"], i);
    EXPECT_EQ(meta[i]["file_name"], name);
    EXPECT_EQ(nlohmann::json::parse(read_png(out + "/" + name).texts["dpinfer"])["file_name"], name);
    EXPECT_EQ(png_pixels(out).at(name), flat_images.at(std::string(name).substr(6))) << name;
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/run.json"))["options"]["files_per_dir"], 3);
  RunResult status = run({dpinfer_binary(), "status", out, "--prompts", dir.file("p.txt")});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(contains(status.out, "total: 10/10 done, 0 failed, 0 missing\n")) << status.out;

  // A rerun skips all, and removes a dead writer's temporary in a subdirectory (only there:
  // a tree of the user's under --out is not searched).
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string h(host);
  for (char& c : h)
    if (c == '.') c = '_';
  const std::string stale = "/.000004.png." + h + ".999999999.dpinfer-tmp";
  write_file(out + "/00001" + stale, "partial");
  fs::create_directories(out + "/mine");
  write_file(out + "/mine" + stale, "the user's");
  RunResult again = launch_generate(2, with({"--files-per-dir", "3"}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "10/10 images (100.0%), 10 skipped")) << again.err;
  EXPECT_TRUE(contains(again.err, "removed 1 stale temporary file(s)")) << again.err;
  EXPECT_FALSE(fs::exists(out + "/00001" + stale));
  EXPECT_TRUE(fs::exists(out + "/mine" + stale));
  fs::remove_all(out + "/mine");

  // Another --files-per-dir, or the flat layout: refused, naming the item, both paths and the
  // option that resumes it; nothing written.
  const std::set<std::string> files_before = files_under(out);
  const std::string manifests_before = read_file(out + "/manifest.rank0.jsonl") + read_file(out + "/manifest.rank1.jsonl");
  RunResult other = generate(with({"--files-per-dir", "4"}));
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_TRUE(contains(other.err, "already holds item 3 as 00001/000003.png (manifest.rank0.jsonl), but this run "
                                  "writes 00000/000003.png (--files-per-dir 4); give --files-per-dir 3 to resume it, "
                                  "another --out, or --overwrite"))
      << other.err;
  RunResult flat_again = generate(base);
  EXPECT_EQ(flat_again.exit_code, 2) << flat_again.err;
  EXPECT_TRUE(contains(flat_again.err, "already holds item 0 as 00000/000000.png (manifest.rank0.jsonl), but this "
                                       "run writes 000000.png (--files-per-dir 0); give --files-per-dir 3 to resume it"))
      << flat_again.err;
  RunResult jpeg = generate(with({"--image-format", "jpeg"}));
  EXPECT_EQ(jpeg.exit_code, 2) << jpeg.err;
  EXPECT_TRUE(contains(jpeg.err, "but this run writes 000000.jpg (--image-format jpeg --files-per-dir 0); give "
                                 "--image-format png --files-per-dir 3 to resume it"))
      << jpeg.err;
  EXPECT_EQ(files_under(out), files_before);
  EXPECT_EQ(read_file(out + "/manifest.rank0.jsonl") + read_file(out + "/manifest.rank1.jsonl"), manifests_before);

  // --overwrite makes them again in the new layout; merge and status follow the records.
  RunResult over = generate(with({"--files-per-dir", "4", "--overwrite"}));
  ASSERT_EQ(over.exit_code, 0) << over.err;
  meta = read_jsonl(out + "/metadata.jsonl");
  ASSERT_EQ(meta.size(), 10u);
  EXPECT_EQ(meta[9]["file_name"], "00002/000009.png");
  EXPECT_EQ(png_pixels(out).at("00002/000009.png"), flat_images.at("000009.png"));
  fs::remove(out + "/00002/000009.png");
  RunResult merge = run({dpinfer_binary(), "merge", out});
  EXPECT_EQ(merge.exit_code, 0) << merge.err;
  EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").size(), 9u) << "the row of the missing file is left out";
  status = run({dpinfer_binary(), "status", out, "--prompts", dir.file("p.txt")});
  EXPECT_TRUE(contains(status.out, "total: 9/10 done, 0 failed, 1 missing\n")) << status.out;
}

TEST(WorkerProcess, SigtermStopsAfterTheBatchWith143AndTheRunResumes) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(40));
  std::string out = dir.file("out");
  Child worker({kWorker, "generate", dir.file("p.txt"), "--out", out},
               {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "50"}});
  ASSERT_TRUE(wait_until([&] { return fs::exists(out) && png_pixels(out).size() >= 3; }, 60s)) << worker.err_so_far();
  auto t0 = std::chrono::steady_clock::now();
  worker.signal(SIGTERM);
  RunResult r = worker.wait(30s);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_TRUE(contains(r.err, "stopped by SIGTERM")) << r.err;
  size_t done = png_pixels(out).size();
  EXPECT_EQ(ok_counts(out).size(), done) << "the manifest holds every finished image";
  RunResult rest = generate({dir.file("p.txt"), "--out", out});
  EXPECT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(png_pixels(out).size(), 40u);
}

// Rank 0 hosts the store. Stopped by the same SIGTERM as its peers, it must wait for
// them (a bounded while) before it exits: a peer that is mid-item records the item and
// then counts it in the store, and a store gone by then must not turn the recorded item
// into a failed one (it once did: an "ok" then an "error" record for one item).
TEST(WorkerProcess, SigtermWhileAPeerIsMidItemRecordsItOnceAsOk) {
  TempDir dir;
  // Contiguous over 2 ranks: rank 0 gets the 10 quick items, rank 1 the 10 slow ones
  // (1 s each), so rank 0 is done and waiting when the signal comes, and rank 1 is busy.
  std::string prompts = numbered_prompts(10);
  for (int i = 0; i < 10; ++i) prompts += "SLOW-ITEM number " + std::to_string(i) + "\n";
  write_file(dir.file("p.txt"), prompts);
  std::string out = dir.file("out");
  Child launcher({dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate", dir.file("p.txt"),
                  "--out", out},
                 {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return fs::exists(out + "/000010.png"); }, 60s)) << launcher.err_so_far();
  launcher.signal(SIGTERM);
  RunResult r = launcher.wait(30s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  int ok = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().filename().string().rfind("manifest", 0) != 0) continue;
    for (const auto& rec : read_jsonl(e.path().string())) {
      EXPECT_EQ(rec["status"], "ok") << e.path() << ": " << rec.dump() << "\n" << r.err;
      ok += rec["status"] == "ok";
    }
  }
  EXPECT_GE(ok, 12) << "rank 0's 10 items, and rank 1's first slow item and the one it was making";
  EXPECT_EQ(ok_counts(out).size(), png_pixels(out).size()) << "every PNG is recorded once";
  EXPECT_LT(png_pixels(out).size(), 20u) << "the signal came mid-run";
}

// A batch that would outlast SLURM's KillWait is abandoned between two denoising steps
// once --stop-timeout has passed: nothing of it is written or recorded, and the next
// run makes its items.
TEST(WorkerProcess, SigtermAbandonsALongBatchAfterTheStopTimeout) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(16));
  std::string out = dir.file("out");
  // Batches of 8 at 0.5 s per image: 4 s each.
  Child worker({kWorker, "generate", dir.file("p.txt"), "--out", out, "--batch-size", "8", "--stop-timeout", "1"},
               {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "500"}});
  ASSERT_TRUE(wait_until([&] { return contains(worker.err_so_far(), "on 1 rank(s)"); }, 60s))
      << worker.err_so_far();
  std::this_thread::sleep_for(500ms);
  auto t0 = std::chrono::steady_clock::now();
  worker.signal(SIGTERM);
  RunResult r = worker.wait(30s);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_GE(took, 0.9) << "the batch had --stop-timeout 1 to finish";
  EXPECT_LT(took, 2.5) << "not the 3.5 s the batch still needed";
  EXPECT_TRUE(contains(r.err, "abandoned a batch of 8 item(s)")) << r.err;
  EXPECT_EQ(png_pixels(out).size(), 0u);
  EXPECT_EQ(ok_counts(out).size(), 0u) << "nothing recorded for the abandoned batch";
  RunResult rest = generate({dir.file("p.txt"), "--out", out, "--batch-size", "8"});
  EXPECT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(png_pixels(out).size(), 16u);
  for (auto [index, c] : ok_counts(out)) EXPECT_EQ(c, 1) << "item " << index;
}

TEST(WorkerProcess, AFailingItemIsRecordedAndTheJobGoesOnWithStatus3) {
  TempDir dir;
  write_file(dir.file("p.txt"), "fine one\nthis is a FAIL-ITEM\nfine two\nNAN-ITEM here\nfine three\n");
  RunResult r = launch_generate(2, {dir.file("p.txt"), "--out", dir.file("out"), "--batch-size", "2"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  auto meta = read_jsonl(dir.file("out/metadata.jsonl"));
  EXPECT_EQ(meta.size(), 3u);
  auto failures = read_jsonl(dir.file("out/failures.jsonl"));
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0]["index"], 1);
  EXPECT_EQ(failures[0]["status"], "error");
  EXPECT_TRUE(contains(failures[0]["error"].get<std::string>(), "simulated failure")) << failures[0];
  EXPECT_EQ(failures[1]["index"], 3);
  EXPECT_TRUE(contains(failures[1]["error"].get<std::string>(), "NaN")) << failures[1];
  EXPECT_FALSE(fs::exists(dir.file("out/000001.png")));
  EXPECT_TRUE(fs::exists(dir.file("out/000002.png")));
}

/// The records of every manifest in `dir` whose status is `status`.
std::vector<nlohmann::json> records_with_status(const std::string& dir, const std::string& status) {
  std::vector<nlohmann::json> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("manifest", 0) == 0)
      for (const auto& rec : read_jsonl(e.path().string()))
        if (rec["status"] == status) found.push_back(rec);
  return found;
}

// A cause that fails every item (a size the model cannot make, a broken CUDA context)
// stops the run after --max-failures-in-a-row of them instead of recording a failure per
// item of the whole prompts file. What failed stays recorded, and the next run retries it.
TEST(WorkerProcess, ManyFailedItemsInARowStopTheRunAndTheNextRunRetriesThem) {
  TempDir dir;
  std::string prompts;
  for (int i = 0; i < 10; ++i) prompts += "FAIL-ITEM number " + std::to_string(i) + "\n";
  write_file(dir.file("p.txt"), prompts);
  const std::string out = dir.file("out");
  // Batches of 3 fail and are retried item by item; the 4th failure, in the second batch, stops the writer.
  RunResult r = generate({dir.file("p.txt"), "--out", out, "--batch-size", "3", "--max-failures-in-a-row", "4"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0: stopping after 4 failed items in a row (--max-failures-in-a-row 4), the "
                              "last with: simulated failure for 'FAIL-ITEM number 3'; fix the cause, then run the "
                              "same command again"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  EXPECT_EQ(records_with_status(out, "error").size(), 4u) << "nothing recorded after the 4th failure";

  // Without the stop, every item is tried: the 4 recorded ones again, and the 6 never tried.
  RunResult all = generate({dir.file("p.txt"), "--out", out, "--max-failures-in-a-row", "0"});
  EXPECT_EQ(all.exit_code, 3) << all.err;
  auto failures = read_jsonl(out + "/failures.jsonl");
  ASSERT_EQ(failures.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(failures[i]["index"], i);

  // An image between failures starts the count again: 3, an image, 3 never reach 4.
  write_file(dir.file("mixed.txt"), "FAIL-ITEM a\nFAIL-ITEM b\nFAIL-ITEM c\nfine\nFAIL-ITEM d\nFAIL-ITEM e\n"
                                    "FAIL-ITEM f\nfine too\n");
  RunResult mixed = generate({dir.file("mixed.txt"), "--out", dir.file("mixed"), "--max-failures-in-a-row", "4"});
  EXPECT_EQ(mixed.exit_code, 3) << mixed.err;
  EXPECT_EQ(read_jsonl(dir.file("mixed/failures.jsonl")).size(), 6u);

  // Under the launcher, the rank that stops is the root cause and takes the group down.
  RunResult group = launch_generate(2, {dir.file("p.txt"), "--out", dir.file("group"), "--max-failures-in-a-row", "2"},
                                    {{"DPINFER_FAKE_DELAY_MS", "20"}});
  EXPECT_EQ(group.exit_code, 1) << group.err;
  EXPECT_TRUE(contains(group.err, "root cause: rank ")) << group.err;
  EXPECT_TRUE(contains(group.err, "failed items in a row (--max-failures-in-a-row 2)")) << group.err;

  RunResult bad = generate({dir.file("p.txt"), "--out", out, "--max-failures-in-a-row", "-1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--max-failures-in-a-row: expected 0 (never stop) or more items, got -1")) << bad.err;
}

// --image-format jpeg: 000000.jpg files that the records name, resumed like PNGs; a resume
// in the other format is refused (the directory would hold both), --overwrite makes them again.
TEST(WorkerProcess, JpegOutputIsRecordedResumedAndNotMixedWithPng) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(4));
  const std::string out = dir.file("out");
  RunResult r = launch_generate(2, {dir.file("p.txt"), "--out", out, "--image-format", "jpg", "--jpeg-quality", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto meta = read_jsonl(out + "/metadata.jsonl");
  ASSERT_EQ(meta.size(), 4u);
  RunResult png = generate({dir.file("p.txt"), "--out", dir.file("png")});
  ASSERT_EQ(png.exit_code, 0) << png.err;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "00000" + std::to_string(i);
    EXPECT_EQ(meta[i]["file_name"], name + ".jpg");
    EXPECT_FALSE(fs::exists(out + "/" + name + ".png"));
    DecodedJpeg j = read_jpeg(out + "/" + name + ".jpg");
    DecodedPng p = read_png(dir.file("png/" + name + ".png"));
    ASSERT_EQ(j.pixels.size(), p.pixels.size());
    double sum = 0;
    for (size_t k = 0; k < p.pixels.size(); ++k) sum += std::abs(int(j.pixels[k]) - int(p.pixels[k]));
    // The test pipeline's pixels are noise, JPEG's worst case; at quality 100 (no chroma subsampling,
    // quantization steps of 1) only the colour conversion's and the DCT's rounding are left.
    EXPECT_LT(sum / p.pixels.size(), 4.0) << "the same image, within JPEG's loss at quality 100";
    EXPECT_EQ(j.user_comment, p.texts["parameters"]);
    EXPECT_EQ(nlohmann::json::parse(j.comment)["file_name"], name + ".jpg");
    EXPECT_EQ(nlohmann::json::parse(j.comment)["prompt"], meta[i]["prompt"]);
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/run.json"))["options"]["image_format"], "jpeg");

  RunResult again = generate({dir.file("p.txt"), "--out", out, "--image-format", "jpeg"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "skipped 4 item(s) whose JPEG exists")) << again.err;

  RunResult mixed = generate({dir.file("p.txt"), "--out", out});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "already holds item 0 as 000000.jpg (manifest.rank0.jsonl), but this run writes "
                                  "000000.png (--image-format png); give --image-format jpeg to resume it"))
      << mixed.err;
  RunResult over = generate({dir.file("p.txt"), "--out", out, "--overwrite"});
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_EQ(read_jsonl(out + "/metadata.jsonl").at(0)["file_name"], "000000.png");

  RunResult bad = generate({dir.file("p.txt"), "--out", out, "--image-format", "gif"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--image-format: expected png, jpeg or webp, got 'gif'")) << bad.err;
  RunResult q = generate({dir.file("p.txt"), "--out", out, "--image-format", "jpeg", "--jpeg-quality", "0"});
  EXPECT_EQ(q.exit_code, 2) << q.err;
  EXPECT_TRUE(contains(q.err, "--jpeg-quality: expected 1..100, got 0")) << q.err;
  RunResult w = generate({dir.file("p.txt"), "--out", out, "--image-format", "webp", "--webp-quality", "101"});
  EXPECT_EQ(w.exit_code, 2) << w.err;
  EXPECT_TRUE(contains(w.err, "--webp-quality: expected 0..100, got 101")) << w.err;
}

// --image-format webp (Pillow reads the files: ctest webp_opens_in_pillow_with_metadata): the
// records name .webp files, a rerun skips them, and a rerun in another format is refused.
TEST(WorkerProcess, WebpFilesAreRecordedResumedAndNotMixed) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(3));
  const std::string out = dir.file("out");
  RunResult r = launch_generate(2, {dir.file("p.txt"), "--out", out, "--image-format", "webp", "--webp-lossless"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto meta = read_jsonl(out + "/metadata.jsonl");
  ASSERT_EQ(meta.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const std::string name = "00000" + std::to_string(i) + ".webp";
    EXPECT_EQ(meta[i]["file_name"], name);
    EXPECT_EQ(read_file(out + "/" + name).substr(8, 4), "WEBP");
  }
  RunResult again = generate({dir.file("p.txt"), "--out", out, "--image-format", "webp"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "skipped 3 item(s) whose WebP exists")) << again.err;
  RunResult mixed = generate({dir.file("p.txt"), "--out", out, "--image-format", "jpeg"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_TRUE(contains(mixed.err, "(--image-format jpeg); give --image-format webp to resume it")) << mixed.err;
}

TEST(WorkerProcess, BadPromptFilesExit2NamingTheLine) {
  TempDir dir;
  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"ok\"}\n{\"prompt\": \"x\", \"stepz\": 3}\n");
  RunResult r = generate({dir.file("bad.jsonl"), "--out", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "bad.jsonl' line 2: unknown key 'stepz'")) << r.err;
  EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  RunResult missing = generate({dir.file("nope.txt")});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  write_file(dir.file("empty.txt"), "\n\n");
  EXPECT_EQ(generate({dir.file("empty.txt"), "--out", dir.file("out")}).exit_code, 2);
  write_file(dir.file("odd.jsonl"), "{\"prompt\": \"x\", \"width\": 20}\n");
  RunResult odd = generate({dir.file("odd.jsonl"), "--out", dir.file("out")});
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_TRUE(contains(odd.err, "line 1: size 20x8 is not a multiple of 8")) << odd.err;
  RunResult bad_opt = generate({dir.file("empty.txt"), "--shard-mode", "random"});
  EXPECT_EQ(bad_opt.exit_code, 2);
}

// More bad input: each is one line naming what is wrong, exit 2, and nothing written.
TEST(WorkerProcess, BadPathsNumbersAndCharactersExit2WithOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a prompt\nanother prompt\n");
  write_file(dir.file("afile"), "");
  fs::create_directory(dir.file("adir"));
  write_file(dir.file("nul.jsonl"), std::string("{\"prompt\": \"ok\"}\n{\"prompt\": \"nul\\u0000byte\"}\n"));
  write_file(dir.file("seed.jsonl"), "{\"prompt\": \"x\", \"seed\": 9223372036854775807, \"num_images\": 3}\n");
  write_file(dir.file("cfg.jsonl"), "{\"prompt\": \"x\", \"guidance_scale\": 1e999}\n");
  write_file(dir.file("float_steps.json"), "{\"steps\": 3.5}");
  write_file(dir.file("twice.jsonl"), "{\"prompt\": \"a\", \"steps\": 3, \"prompt\": \"b\"}\n");
  write_file(dir.file("flag.json"), "{\"overwrite\": \"yes\"}");
  write_file(dir.file("broken.json"), "{\"steps\": 3,");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{dir.file("adir")}, "the prompts folder '" + dir.file("adir") + "' holds no .txt file"},
      {{dir.file("p.txt"), "--out", dir.file("afile")}, "--out '" + dir.file("afile") + "': cannot make it a directory"},
      {{dir.file("p.txt"), "--guidance-scale", "nan"}, "--guidance-scale: expected a finite number"},
      {{dir.file("p.txt"), "--seed", "-3"}, "--seed: expected 0 or more, got -3"},
      {{dir.file("p.txt"), "--seed", "9223372036854775807"}, "item 1 would get a seed past 2^63-1"},
      {{dir.file("nul.jsonl")}, "nul.jsonl' line 2: 'prompt' contains a NUL character"},
      {{dir.file("seed.jsonl")}, "seed.jsonl' line 1: 'seed' + num_images - 1 must stay below 2^63"},
      {{dir.file("cfg.jsonl")}, "cfg.jsonl' line 1: invalid JSON"},
      {{dir.file("twice.jsonl")}, "twice.jsonl' line 1: key 'prompt' appears twice; keep one"},
      {{dir.file("p.txt"), "a", "b"}, "the following arguments were not expected: a b; see 'dpinfer generate --help'"},
      {{dir.file("p.txt"), "--config", dir.file("float_steps.json")}, "float_steps.json': 'steps' must be an integer, got 3.5"},
      {{dir.file("p.txt"), "--config", dir.file("flag.json")}, "flag.json': 'overwrite' is a flag: give true or false"},
      {{dir.file("p.txt"), "--config", dir.file("broken.json")}, "broken.json': not JSON (parse error at line 1"},
      {{dir.file("p.txt"), "--config", dir.file("flag.json"), "--config", dir.file("flag.json")},
       "--config given more than once"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = args;
    if (std::find(argv.begin(), argv.end(), "--out") == argv.end()) argv.insert(argv.end(), {"--out", dir.file("out")});
    RunResult r = generate(argv);
    EXPECT_EQ(r.exit_code, 2) << message << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir.file("out/000000.png")));
  // Several ranks cannot share one stdin: refused before any rendezvous.
  RunResult stdin_ranks = generate({"-", "--out", dir.file("out")}, {{"RANK", "1"}, {"WORLD_SIZE", "2"},
                                                                     {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(stdin_ranks.exit_code, 2) << stdin_ranks.err;
  EXPECT_TRUE(contains(stdin_ranks.err, "prompts from stdin ('-') work with one rank only")) << stdin_ranks.err;
  RunResult launch_stdin = run({dpinfer_binary(), "launch", "--nproc-per-node", "2", "-"}, {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(launch_stdin.exit_code, 2) << launch_stdin.err;
  EXPECT_TRUE(contains(launch_stdin.err, "dpinfer launch gives its workers no stdin")) << launch_stdin.err;
  // An upper-case .JSONL is JSON lines too.
  write_file(dir.file("upper.JSONL"), "{\"prompt\": \"from json\"}\n");
  RunResult upper = generate({dir.file("upper.JSONL"), "--out", dir.file("upper")});
  ASSERT_EQ(upper.exit_code, 0) << upper.err;
  EXPECT_EQ(read_jsonl(dir.file("upper/metadata.jsonl")).at(0)["prompt"], "from json");
}

TEST(WorkerProcess, ACrashingRankIsNamedByTheLauncher) {
  TempDir dir;
  write_file(dir.file("p.txt"), "one\ntwo\nthree EXIT-ITEM\nfour\n");
  RunResult r = launch_generate(2, {dir.file("p.txt"), "--out", dir.file("out")}, {{"DPINFER_FAKE_DELAY_MS", "100"}});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: rank 1")) << r.err;
}

TEST(WorkerProcess, ConfigFileGivesDefaultsAndTheCommandLineWins) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  write_file(dir.file("c.json"), "{\"seed\": 40, \"steps\": 2, \"guidance_scale\": 3, \"overwrite\": true}");
  RunResult r = generate({dir.file("p.txt"), "--config", dir.file("c.json"), "--out", dir.file("out"), "--steps", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto meta = read_jsonl(dir.file("out/metadata.jsonl"));
  EXPECT_EQ(meta[0]["seed"], 40);
  EXPECT_EQ(meta[0]["steps"], 6);
  EXPECT_EQ(meta[0]["guidance_scale"], 3.0);
  write_file(dir.file("bad.json"), "{\"stepz\": 2}");
  RunResult bad = generate({dir.file("p.txt"), "--config", dir.file("bad.json")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "unknown key 'stepz'")) << bad.err;
}

TEST(WorkerProcess, OuterShardsPartitionTheItems) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(7));
  std::string out = dir.file("out");
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(generate({dir.file("p.txt"), "--out", out, "--shard", std::to_string(i) + "/3"}).exit_code, 0);
  auto counts = ok_counts(out);
  ASSERT_EQ(counts.size(), 7u);
  for (auto [index, c] : counts) EXPECT_EQ(c, 1) << index;
}

TEST(WorkerProcess, DeviceCudaWithoutAGpuIsAClearError) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("out"), "--device", "cuda"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "no CUDA device is visible")) << r.err;
}

namespace {

std::vector<std::string> launch_argv(const std::vector<std::string>& launch_opts, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {dpinfer_binary(), "launch"};
  argv.insert(argv.end(), launch_opts.begin(), launch_opts.end());
  argv.insert(argv.end(), {"--", kWorker, "generate"});
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

/// N of the "[dpinfer] N/TOTAL images..." lines of `err`, in order.
std::vector<int> progress_counts(const std::string& err, const std::string& total) {
  std::vector<int> out;
  std::regex re("^\\[dpinfer\\] (\\d+)/" + total + " images");
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back(std::stoi(m[1]));
  }
  return out;
}

}  // namespace

// Issue 3, "Progress": the launcher's aggregated line over dpinfer's own workers.
TEST(WorkerProcess, TheLauncherShowsTheRanksProgressAsOneLine) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(10));
  const std::vector<std::string> args = {dir.file("p.txt"), "--out", dir.file("out")};
  RunResult r = run(launch_argv({"--nproc-per-node", "2", "--progress-interval", "0.2"}, args),
                    {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "150"}}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int> counts = progress_counts(r.err, "10");
  ASSERT_GE(counts.size(), 2u) << "periodic lines while the ranks work, then the final one: " << r.err;
  for (size_t i = 1; i < counts.size(); ++i) EXPECT_LE(counts[i - 1], counts[i]) << r.err;
  EXPECT_LT(counts.front(), 10) << r.err;
  EXPECT_TRUE(contains(r.err, "[dpinfer] 10/10 images (100.0%), ")) << r.err;
  std::regex whole(R"(^(\[dpinfer\] |\[rank [01]\] )[^\[\r\x1b]*$)");
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);)
    EXPECT_TRUE(std::regex_match(line, whole)) << "a line that is not whole: '" << line << "'";
  // Rank 0's summary names each rank at info level.
  EXPECT_TRUE(contains(r.err, "[rank 0]   rank 0: 5 generated, 0 skipped, 0 failed, ")) << r.err;
  EXPECT_TRUE(contains(r.err, "[rank 0]   rank 1: 5 generated, 0 skipped, 0 failed, ")) << r.err;

  // Resumed: everything is skipped, and the line says so.
  RunResult again = run(launch_argv({"--nproc-per-node", "2", "--progress-interval", "0.2"}, args),
                        {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "[dpinfer] 10/10 images (100.0%), 10 skipped\n")) << again.err;
}

TEST(WorkerProcess, ProgressCountsFailedItemsInDynamicMode) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(5) + "bad FAIL-ITEM\n" + numbered_prompts(3));
  RunResult r = run(launch_argv({"--nproc-per-node", "2", "--progress-interval", "0.2"},
                                {dir.file("p.txt"), "--out", dir.file("out"), "--shard-mode", "dynamic"}),
                    {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "50"}}, 120s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "[dpinfer] 9/9 images (100.0%), ")) << r.err;
  EXPECT_TRUE(contains(r.err, ", 1 failed\n")) << r.err;
}

// With several nodes, node 0 shows the whole run (rank 0 reads the store), the
// others their own share.
TEST(WorkerProcess, ProgressAcrossTwoNodes) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(10));
  const std::string port = std::to_string(free_port());
  auto node = [&](int n) {
    return std::make_unique<Child>(
        launch_argv({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "1", "--master-port", port,
                     "--progress-interval", "0.2"},
                    {dir.file("p.txt"), "--out", dir.file("out")}),
        std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "100"}});
  };
  auto node0 = node(0);
  auto node1 = node(1);
  RunResult r0 = node0->wait(120s);
  RunResult r1 = node1->wait(120s);
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_TRUE(contains(r0.err, "[dpinfer] 10/10 images (100.0%), ")) << r0.err;
  EXPECT_TRUE(contains(r1.err, "[dpinfer] 5/5 images on this node (100.0%), ")) << r1.err;
}

// ---- Issue 11: hardening from two outside audits (worker items) ----

// Item 6: the rank that failed first is the root cause, even when it takes longer to
// die than its peers take to notice. Here rank 0 finds a resume conflict (exit 2) and
// then lingers 2 s in its teardown, as a worker freeing a big model does; rank 1, busy,
// sees the abort at once. Rank 1 used to die first and be named, with exit 1 instead
// of rank 0's 2 (so that the PROMPTS form's "bad input: not restarting" was missed too).
TEST(WorkerProcess, TheRankThatFailedFirstIsTheRootCauseEvenIfItDiesLast) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(12));
  std::string out = dir.file("out");
  ASSERT_EQ(generate({dir.file("p.txt"), "--out", out, "--shard", "0/2"}).exit_code, 0);  // items 0-5: rank 0's
  // Item 0 made with another seed: rank 0's resume check refuses it (bad input, exit 2).
  std::string manifest;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().rfind("manifest", 0) == 0) manifest = e.path().string();
  std::string edited;
  for (auto rec : read_jsonl(manifest)) {
    if (rec["index"] == 0) rec["seed"] = 999;
    edited += rec.dump() + "\n";
  }
  write_file(manifest, edited);
  RunResult r = run({dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate",
                     dir.file("p.txt"), "--out", out},
                    {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "100"}, {"DPINFER_FAKE_EXIT_DELAY_MS", "2000@0"}},
                    120s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: rank 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "made with seed 999")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "after dpinfer stopped it")) << "rank 1 waited for the teardown: " << r.err;
}

// Item 6, the audit's case: rank 0 fails in the end-of-run merge; rank 1, at the
// "finished" barrier, may then find the store gone. Rank 0 is still the root cause.
TEST(WorkerProcess, AFailedMergeOnRankZeroIsTheRootCause) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    TempDir dir;
    write_file(dir.file("p.txt"), numbered_prompts(3) + "SLOW-ITEM last\n" + numbered_prompts(4));
    std::string out = dir.file("out");
    fs::create_directories(out + "/metadata.jsonl");  // a directory: the merge cannot write the file
    RunResult r = run({dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate",
                       dir.file("p.txt"), "--out", out},
                      {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_EXIT_DELAY_MS", "1500@0"}}, 120s);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "root cause: rank 0")) << r.err;
    EXPECT_TRUE(contains(r.err, "metadata.jsonl")) << r.err;
  }
}

// Item 8: a peer that dies after the load barrier used to hold rank 0 for 5 s in
// WorkerGroup::leave (and 5 s more per restart).
TEST(WorkerProcess, ADeadPeerDoesNotDelayTheTeardown) {
  TempDir dir;
  write_file(dir.file("p.txt"), "one\ntwo\nthree EXIT-ITEM\nfour\n");
  RunResult r = run({dpinfer_binary(), "launch", "--nproc-per-node", "2", "--max-restarts", "1", "--", kWorker,
                     "generate", dir.file("p.txt"), "--out", dir.file("out")},
                    {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "50"}}, 120s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: rank 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting the worker group")) << r.err;
  EXPECT_LT(r.seconds, 6.0) << "two attempts, each stopped at once (was 5 s each): " << r.err;
}

// Item 7: a full disk stops the run at the first ENOSPC, says so, and a rerun resumes.
TEST(WorkerProcess, AFullDiskStopsAtOnceAndTheRerunResumes) {
  TempDir dir;
  // 256x256 random pixels do not compress: about 197 KB a PNG, so two fit in 400k.
  write_file(dir.file("p.txt"), numbered_prompts(20));
  TmpfsMount disk(dir.file("out"), "400k");
  if (!disk.ok()) GTEST_SKIP() << disk.why();
  std::string out = dir.file("out");
  RunResult r = generate({dir.file("p.txt"), "--out", out, "--width", "256", "--height", "256"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "of --out '" + out + "' is full")) << r.err;
  EXPECT_TRUE(contains(r.err, "No space left on device")) << r.err;
  EXPECT_TRUE(contains(r.err, "run the same command again: it resumes")) << r.err;
  EXPECT_FALSE(contains(r.err, "item 3 failed")) << "no item after the first ENOSPC is tried: " << r.err;
  int errors = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().rfind("manifest", 0) == 0)
      for (const auto& rec : read_jsonl(e.path().string())) errors += rec["status"] != "ok";
  EXPECT_EQ(errors, 0) << "no item is recorded as failed for want of space";
  const size_t made = png_pixels(out).size();
  EXPECT_GE(made, 1u);
  EXPECT_LT(made, 20u);
  // Under the launcher, the same, once.
  RunResult l = launch_generate(2, {dir.file("p.txt"), "--out", out, "--width", "256", "--height", "256"});
  EXPECT_EQ(l.exit_code, 1) << l.err;
  EXPECT_TRUE(contains(l.err, "is full")) << l.err;
  // Room again: the rerun makes the rest.
  std::string keep = dir.file("keep");
  fs::create_directories(keep);
  for (const auto& e : fs::directory_iterator(out)) fs::copy(e.path(), keep + "/" + e.path().filename().string());
  RunResult rest = generate({dir.file("p.txt"), "--out", keep, "--width", "256", "--height", "256"});
  EXPECT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_TRUE(contains(rest.err, "skipped " + std::to_string(made) + " item(s)")) << rest.err;
  EXPECT_EQ(png_pixels(keep).size(), 20u);
}

// Item 9: an --out that exists but cannot be written is bad input before the model
// loads (it was exit 1, after the model had loaded).
TEST(WorkerProcess, AnUnwritableOutIsBadInputBeforeTheModelLoads) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  TmpfsMount ro(dir.file("ro"), "64k", /*read_only=*/true);
  if (!ro.ok()) GTEST_SKIP() << ro.why();
  RunResult r = generate({dir.file("p.txt"), "--out", dir.file("ro")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "is not writable (Read-only file system)")) << r.err;
}

// Item 15: `dpinfer generate run.py` is refused as `dpinfer launch run.py` is.
TEST(WorkerProcess, GenerateRefusesAProgramAsPrompts) {
  TempDir dir;
  write_file(dir.file("run.py"), "print('hi')\n");
  RunResult r = generate({dir.file("run.py"), "--out", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "put it after '--'")) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out/000000.png")));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

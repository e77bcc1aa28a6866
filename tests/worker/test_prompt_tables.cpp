// CSV/TSV prompts files and --keep-fields through real runs (issue 27, inputs): the rows
// become items on every rank, a line's own fields reach each of its images' records, and
// `dpinfer status` reads the file as the run did (run.json's --prompt-column, --keep-fields).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kWorker = DPINFER_TEST_WORKER;

RunResult launch(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {dpinfer_binary(), "launch", "--nproc-per-node", "2", "--", kWorker, "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 120s);
}


TEST(PromptTables, ACsvsRowsAndKeptColumnsReachEveryRecordOnEveryRank) {
  TempDir dir;
  // As pandas' to_csv writes it: a quoted cell with a comma, one with a newline and quotes.
  write_file(dir.file("p.csv"),
             "caption,seed,num_images,source,note\n"
             "\"a red, round circle\",5,2,geneval,\n"
             "\"a sign that says \"\"hi\"\"\nin two lines\",,1,coco,\"x,y\"\n"
             "plain,9,1,coco,z\n");
  RunResult r = launch({dir.file("p.csv"), "--out", dir.file("out"), "--prompt-column", "caption", "--keep-fields"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto meta = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(meta.size(), 4u);
  EXPECT_EQ(meta[0]["prompt"], "a red, round circle");
  EXPECT_EQ(meta[0]["seed"], 5);
  EXPECT_EQ(meta[1]["seed"], 6) << "image 1 of the line: its seed + 1";
  EXPECT_EQ(meta[0]["source"], "geneval");
  EXPECT_EQ(meta[1]["note"], "");
  EXPECT_EQ(meta[2]["prompt"], "a sign that says \"hi\"\nin two lines");
  EXPECT_EQ(meta[2]["line"], 3);
  EXPECT_EQ(meta[2]["note"], "x,y");
  EXPECT_EQ(meta[3]["line"], 5) << "the row after a two-line cell";
  EXPECT_EQ(meta[3]["source"], "coco");
  // `dpinfer status` reads the file as the run did, from run.json.
  RunResult status = run({dpinfer_binary(), "status", dir.file("out")}, {}, 60s);
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
}

TEST(PromptTables, GenevalsMetadataLinesKeepTheirFields) {
  TempDir dir;
  write_file(dir.file("evaluation_metadata.jsonl"),
             "{\"tag\": \"single_object\", \"include\": [{\"class\": \"bench\", \"count\": 1}], \"prompt\": \"a photo "
             "of a bench\"}\n"
             "{\"tag\": \"counting\", \"include\": [{\"class\": \"cow\", \"count\": 2}], \"exclude\": [{\"class\": "
             "\"cow\", \"count\": 3}], \"prompt\": \"a photo of two cows\"}\n");
  RunResult refused = launch({dir.file("evaluation_metadata.jsonl"), "--out", dir.file("refused")});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_TRUE(contains(refused.err, "line 1: unknown key 'include'")) << refused.err;
  RunResult r = launch({dir.file("evaluation_metadata.jsonl"), "--out", dir.file("out"), "--keep-fields"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto meta = read_jsonl(dir.file("out/metadata.jsonl"));
  ASSERT_EQ(meta.size(), 2u);
  EXPECT_EQ(meta[1]["tag"], "counting");
  EXPECT_EQ(meta[1]["include"], nlohmann::json::parse(R"([{"class": "cow", "count": 2}])"));
  EXPECT_EQ(meta[1]["exclude"], nlohmann::json::parse(R"([{"class": "cow", "count": 3}])"));
  EXPECT_FALSE(meta[0].contains("exclude"));
}

TEST(PromptTables, AKeptFieldNamedAsTheRecordsOwnKeysIsRefused) {
  TempDir dir;
  write_file(dir.file("p.csv"), "prompt,status\na,x\n");
  RunResult r = launch({dir.file("p.csv"), "--out", dir.file("a"), "--keep-fields"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "line 1: column 'status' is one that dpinfer writes in each image's record itself")) << r.err;
  // A setting of the model's family is a record key too, known once the model is loaded.
  write_file(dir.file("q.jsonl"), "{\"prompt\": \"a\", \"clip_skip\": 3}\n");
  r = launch({dir.file("q.jsonl"), "--out", dir.file("b"), "--keep-fields"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "line 1: field 'clip_skip' is a setting of ")) << r.err;
}

TEST(PromptTables, ATsvWithBadInputNamesItsLineAndColumn) {
  TempDir dir;
  write_file(dir.file("p.tsv"), "prompt\tsteps\na\t20\nb\tmany\n");
  RunResult r = run({kWorker, "generate", dir.file("p.tsv"), "--out", dir.file("out")}, {{"CUDA_VISIBLE_DEVICES", ""}},
                    60s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "p.tsv' line 3: column 'steps' must be an integer, got 'many'")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/metadata.jsonl")));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// The workers' rendezvous without a launcher (as under srun or mpirun): clear
// timeouts, and a rank that fails stops its peers through the abort flag.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <regex>

#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {

std::map<std::string, std::string> rank_env(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)}, {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}, {"CUDA_VISIBLE_DEVICES", ""}};
}

}  // namespace

TEST(Rendezvous, AWorkerWithoutRankZeroTimesOutSayingWhoWaitedForWhomWhere) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  int port = free_port();
  RunResult r = run({DPINFER_TEST_WORKER, "generate", dir.file("p.txt"), "--out", dir.file("out"),
                     "--rendezvous-timeout", "2"},
                    rank_env(1, 2, port), 60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // The wait is at least the timeout; c10d's TCPStore client may retry once more
  // after a randomised backoff of up to about the timeout, so up to ~2x it.
  EXPECT_TRUE(std::regex_search(r.err, std::regex("rank 1 waited [2-6] s for rank 0's store at 127\\.0\\.0\\.1:" +
                                                  std::to_string(port))))
      << r.err;
  EXPECT_FALSE(contains(r.err, "frame #")) << "no C++ backtrace for the user: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
}

TEST(Rendezvous, RankZeroTimesOutNamingHowManyRanksItWaitedFor) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  RunResult r = run({DPINFER_TEST_WORKER, "generate", dir.file("p.txt"), "--out", dir.file("out"),
                     "--rendezvous-timeout", "2"},
                    rank_env(0, 3, free_port()), 60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 hosted the store at 127.0.0.1:")) << r.err;
  EXPECT_TRUE(contains(r.err, "for the other 2 rank(s)")) << r.err;
}

TEST(Rendezvous, AFailingRankStopsItsPeersThroughTheAbortFlag) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a\nb\nc\nd\n");
  int port = free_port();
  Child rank0({DPINFER_TEST_WORKER, "generate", dir.file("p.txt"), "--out", dir.file("out")}, rank_env(0, 2, port));
  // Rank 1 asks for a GPU that is not there: bad input on that rank only.
  RunResult r1 = run({DPINFER_TEST_WORKER, "generate", dir.file("p.txt"), "--out", dir.file("out"), "--device", "cuda"},
                     rank_env(1, 2, port), 60s);
  EXPECT_EQ(r1.exit_code, 2) << r1.err;
  RunResult r0 = rank0.wait(30s);
  EXPECT_EQ(r0.exit_code, 1) << r0.err;
  EXPECT_TRUE(contains(r0.err, "rank 1 failed: --device cuda: no CUDA device is visible")) << r0.err;
  EXPECT_LT(r0.seconds, 20) << "not the 300 s rendezvous timeout";
}

TEST(Rendezvous, TwoRanksWithoutALauncherShareTheWork) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a\nb\nc\nd\ne\n");
  int port = free_port();
  Child rank0({DPINFER_TEST_WORKER, "generate", dir.file("p.txt"), "--out", dir.file("out")}, rank_env(0, 2, port));
  RunResult r1 = run({DPINFER_TEST_WORKER, "generate", dir.file("p.txt"), "--out", dir.file("out")},
                     rank_env(1, 2, port), 60s);
  RunResult r0 = rank0.wait(60s);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_TRUE(contains(r0.err, "[rank 0] done: 5 generated")) << "outside the launcher a worker prefixes its own lines: "
                                                              << r0.err;
  std::string meta = read_file(dir.file("out/metadata.jsonl"));
  EXPECT_EQ(std::count(meta.begin(), meta.end(), '\n'), 5);
}

// The store under garbage and half-open connections (issue 33): the run is unharmed and its time
// stays within 10% of an unattacked run's. A binary of its own so that ctest runs it alone (RUN_SERIAL): a
// timing on a 2-core machine means nothing beside other tests.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

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


// Many concurrent connections that send garbage, and many that connect and say nothing,
// during a run: it makes every item once, the same images, within 10% of its time.
TEST(StoreTiming, GarbageAndHalfOpenConnectionsLeaveTheRunUnharmed) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(60));
  const std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "100"}};
  auto unattacked = [&](const std::string& out) {
    RunResult r = run(two_rank_launch(kWorker, free_port(), {dir.file("p.txt"), "--out", dir.file(out)}), env, 120s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.seconds;
  };

  // One run under attack, into `out`: its result, with the garbage connections made and the half-open ones held.
  struct Attacked {
    RunResult run;
    long garbage_sent, half_open;
  };
  auto attacked_run = [&](const std::string& out) {
    const int port = free_port();
    Child launcher(two_rank_launch(kWorker, port, {dir.file("p.txt"), "--out", dir.file(out)}), env);
    std::atomic<bool> stop{false};
    std::atomic<long> garbage_sent{0}, half_open{0};
    auto connect_to_store = [&] {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
      }
      return fd;
    };
    std::vector<std::thread> attackers;
    for (int t = 0; t < 16; ++t)
      attackers.emplace_back([&, t] {  // 4 KB of garbage per connection, ~20 connections/s each
        // The garbage is made once: the attack is on the store, not on this machine's 2 cores.
        std::string junk(4096, '\0');
        uint32_t x = 2463534242u + static_cast<uint32_t>(t);
        for (char& c : junk) c = static_cast<char>((x ^= x << 13, x ^= x >> 17, x ^= x << 5));
        while (!stop) {
          const int fd = connect_to_store();
          if (fd >= 0) {
            if (::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) > 0) ++garbage_sent;
            ::close(fd);
          }
          // 20 a second each, ~300 in all: many, concurrently, without the attackers' own CPU (at ~1,200 a
          // second they took a measurable share of the 2 cores) being counted as the store's slowness.
          std::this_thread::sleep_for(50ms);
        }
      });
    for (int t = 0; t < 16; ++t)
      attackers.emplace_back([&] {  // connects, says nothing, holds the connection open
        int fd = -1;
        while (!stop && fd < 0) {
          fd = connect_to_store();
          if (fd < 0) std::this_thread::sleep_for(20ms);
        }
        if (fd >= 0) ++half_open;
        while (!stop) std::this_thread::sleep_for(20ms);
        if (fd >= 0) ::close(fd);
      });
    Attacked result{launcher.wait(120s), 0, 0};
    stop = true;
    for (auto& t : attackers) t.join();
    result.garbage_sent = garbage_sent.load();
    result.half_open = half_open.load();
    return result;
  };
  // Three runs under attack between three unattacked ones. A run's time on this 2-core VM varies by up to a
  // quarter whatever the store does (unattacked runs of the same 60 items took 3.66 to 4.61 s back to back; the
  // sleeps of the fake denoising steps jitter), and that noise only adds time. So the fastest attacked run is
  // compared with the slowest unattacked one: a store that the attack slows makes all three attacked runs slow,
  // while noise alone fails this only when the three attacked runs are the three slowest of the six and 10% slower still
  // (two of each failed one CI run in several: attacked 4.62 and 4.49 s, unattacked 3.69 and 4.01 s).
  std::vector<double> unattacked_seconds;
  std::vector<Attacked> attacked_runs;
  for (int i = 0; i < 3; ++i) {
    unattacked_seconds.push_back(unattacked("unattacked-" + std::to_string(i)));
    attacked_runs.push_back(attacked_run("attacked-" + std::to_string(i)));
  }

  std::string times = "attacked";
  for (const Attacked& a : attacked_runs) {
    ASSERT_EQ(a.run.exit_code, 0) << a.run.err;
    EXPECT_GT(a.garbage_sent, 100) << "the garbage reached the store";
    EXPECT_EQ(a.half_open, 16);
    times += " " + std::to_string(a.run.seconds) + " s (" + std::to_string(a.garbage_sent) + " garbage connections)";
  }
  times += ", unattacked";
  for (double u : unattacked_seconds) times += " " + std::to_string(u) + " s";
  std::cout << times << "\n";
  for (int i = 0; i < 3; ++i) {
    const std::string out = "attacked-" + std::to_string(i);
    const std::map<int, int> counts = ok_counts(dir.file(out));
    ASSERT_EQ(counts.size(), 60u) << out;
    for (const auto& [index, n] : counts) EXPECT_EQ(n, 1) << out << ": item " << index;
    EXPECT_EQ(png_pixels(dir.file(out)), png_pixels(dir.file("unattacked-0"))) << out;
  }
  double fastest_attacked = attacked_runs[0].run.seconds;
  for (const Attacked& a : attacked_runs) fastest_attacked = std::min(fastest_attacked, a.run.seconds);
  const double slowest_unattacked = *std::max_element(unattacked_seconds.begin(), unattacked_seconds.end());
  EXPECT_LE(fastest_attacked, 1.10 * slowest_unattacked) << times;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

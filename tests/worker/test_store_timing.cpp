// The store under garbage and half-open connections (issue 33): the run is unharmed and its time
// stays within 10% of an unattacked run's (the faster of two attacked runs: the machine's noise only adds time). A binary of its own so that ctest runs it alone
// (RUN_SERIAL): a timing on a 2-core machine means nothing beside other tests.
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
  const double before = unattacked("before");

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
      attackers.emplace_back([&, t] {  // 4 KB of garbage per connection, ~100 connections/s each
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
          std::this_thread::sleep_for(10ms);
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
  // Two runs under attack: a run's time on this 2-core machine varies by up to a quarter whatever the store does
  // (unattacked runs of the same 60 items took 3.66 to 4.51 s one after another), and the noise only adds time, so
  // the faster of the two is the attack's cost. A store that the attack slows makes both slow.
  const Attacked first = attacked_run("attacked");
  const Attacked second = attacked_run("attacked-again");
  const double after = unattacked("after");

  for (const Attacked* a : {&first, &second}) {
    ASSERT_EQ(a->run.exit_code, 0) << a->run.err;
    EXPECT_GT(a->garbage_sent, 100) << "the garbage reached the store";
    EXPECT_EQ(a->half_open, 16);
  }
  for (const char* out : {"attacked", "attacked-again"}) {
    const std::map<int, int> counts = ok_counts(dir.file(out));
    ASSERT_EQ(counts.size(), 60u) << out;
    for (const auto& [index, n] : counts) EXPECT_EQ(n, 1) << out << ": item " << index;
    EXPECT_EQ(png_pixels(dir.file(out)), png_pixels(dir.file("before"))) << out;
  }
  const double attacked = std::min(first.run.seconds, second.run.seconds);
  std::cout << "attacked " << first.run.seconds << " s and " << second.run.seconds << " s (" << first.garbage_sent
            << " and " << second.garbage_sent << " garbage connections), unattacked " << before << " s and " << after
            << " s\n";
  // Against the slower of the two unattacked runs around them: the machine's own drift is
  // not the attack's.
  EXPECT_LE(attacked, 1.10 * std::max(before, after))
      << "attacked " << first.run.seconds << " s and " << second.run.seconds << " s, unattacked " << before
      << " s and " << after << " s";
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

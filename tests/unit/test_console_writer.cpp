// ConsoleWriter: the launcher's console output never blocks the supervisor.
#include "dpinfer/launcher/console_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

using dpinfer::launcher::ConsoleWriter;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  /// Reads everything there is now (the read end made non-blocking).
  std::string read_available() {
    ::fcntl(fd[0], F_SETFL, O_NONBLOCK);
    std::string out;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};


TEST(ConsoleWriter, WritesAtOnceWhileThePipeHasRoom) {
  Pipe p;
  ConsoleWriter w(p.fd[1]);
  w.write("[rank 0] hello\n");
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(p.read_available(), "[rank 0] hello\n");
}

TEST(ConsoleWriter, AStalledReaderQueuesInsteadOfBlockingAndNothingIsLostOrReordered) {
  Pipe p;
  ConsoleWriter w(p.fd[1]);
  std::string sent;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 80000; ++i) {  // ~1.8 MB: far more than a pipe holds
    std::string line = "[rank 1] line " + std::to_string(i) + "\n";
    sent += line;
    w.write(line);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_TRUE(w.pending());
  EXPECT_TRUE(w.full()) << w.queued();
  std::string got = p.read_available();
  EXPECT_LT(got.size(), sent.size());
  w.flush_ready();  // the reader made room
  std::thread reader([&] {
    ::fcntl(p.fd[0], F_SETFL, 0);
    char buf[65536];
    ssize_t n;
    while ((n = ::read(p.fd[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  w.drain();
  EXPECT_FALSE(w.pending());
  ::close(p.fd[1]);
  p.fd[1] = -1;
  reader.join();
  EXPECT_EQ(got, sent);
}

TEST(ConsoleWriter, AGoneReaderClosesItAndLaterTextIsDropped) {
  std::signal(SIGPIPE, SIG_IGN);  // as the launcher does
  Pipe p;
  ::close(p.fd[0]);
  p.fd[0] = -1;
  ConsoleWriter w(p.fd[1]);
  w.write("nobody reads this\n");
  EXPECT_TRUE(w.closed());
  EXPECT_FALSE(w.pending());
  w.write("nor this\n");
  w.drain();  // returns at once
  EXPECT_FALSE(w.pending());
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

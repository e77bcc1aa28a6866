#include "dpinfer/util/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace dpinfer {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;

}  // namespace

std::string CommandResult::describe_failure(const std::string& program, std::chrono::milliseconds timeout) const {
  if (!error.empty()) return "cannot run " + program + ": " + error;
  if (timed_out) return program + " did not answer within " + std::to_string(timeout.count() / 1000) + " s";
  if (term_signal) return program + " was killed by signal " + std::to_string(term_signal);
  return program + " exited with status " + std::to_string(exit_code);
}

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    r.error = std::strerror(rc);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      r.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (n == 0) continue;  // the deadline check above kills it
    ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (r.output.size() < kMaxOutput) r.output.append(buf, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) r.term_signal = WTERMSIG(st);
  return r;
}

}  // namespace dpinfer

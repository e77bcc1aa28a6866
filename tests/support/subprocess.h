#pragma once
// Runs real child processes for the process tests: the dpinfer binary under test,
// with captured stdout/stderr, a timeout, and signals sent at chosen moments.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dpinfer::test {

struct RunResult {
  int exit_code = -1;  ///< shell convention: 128+n when killed by signal n; -1 if timed out
  std::string out;
  std::string err;
  double seconds = 0;
  bool timed_out = false;
};

/// A child process with its stdout and stderr captured to files.
class Child {
 public:
  /// Starts `argv` (looked up in PATH) with the current environment, plus `env`, less `unset`.
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
        const std::vector<std::string>& unset = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  /// Waits for the exit; kills the child (SIGKILL) after `timeout`.
  RunResult wait(std::chrono::duration<double> timeout = std::chrono::seconds(60));
  /// What the child has written to stderr so far.
  std::string err_so_far() const;
  std::string out_so_far() const;

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  std::chrono::steady_clock::time_point start_;
  bool reaped_ = false;
};

/// Runs `argv` to its end (see Child).
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              std::chrono::duration<double> timeout = std::chrono::seconds(60));

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
bool wait_until(const std::function<bool()>& cond, std::chrono::duration<double> timeout);

/// True when a process with this pid exists and is not a zombie.
bool process_alive(pid_t pid);

/// Pids of the zombie children of `parent`.
std::vector<pid_t> zombie_children(pid_t parent);

/// A loopback TCP port that was free a moment ago.
int free_port();

/// The path of the dpinfer binary under test.
std::string dpinfer_binary();

}  // namespace dpinfer::test

#pragma once
// The exit-status contract of `dpinfer launch` (README, "Exit statuses").

#include <string>

namespace dpinfer::launcher {

namespace exit_status {
constexpr int kSuccess = 0;
constexpr int kLauncherError = 1;    ///< the launcher itself could not run (port busy, fork failed, ...)
constexpr int kUsage = 2;            ///< bad command-line arguments
constexpr int kIncomplete = 3;       ///< dpinfer status: items failed or missing (as generate's "items failed")
constexpr int kNotExecutable = 126;  ///< the worker command exists but cannot be executed
constexpr int kNotFound = 127;       ///< the worker command was not found
constexpr int kSignalBase = 128;     ///< 128+n: killed by signal n, or interrupted by signal n
}  // namespace exit_status

/// How one process ended, decoded from a wait status.
struct Termination {
  bool signaled = false;  ///< true: killed by `signal`; false: exited with `code`
  int code = 0;
  int signal = 0;

  static Termination from_wait_status(int wait_status);
  static Termination exited(int code) { return {false, code, 0}; }
  static Termination killed(int signal) { return {true, 0, signal}; }

  bool ok() const { return !signaled && code == 0; }
  /// The shell convention: the exit code, or 128+n for signal n.
  int shell_status() const { return signaled ? exit_status::kSignalBase + signal : code; }
  /// "exit code 3" or "signal 9 (SIGKILL)".
  std::string describe() const;
};

/// "SIGKILL" for 9; "signal 77" for an unknown number.
std::string signal_name(int signal);

}  // namespace dpinfer::launcher

#pragma once
// How a worker process ended, decoded from its wait status.

#include <string>

#include "dpinfer/util/exit_status.h"

namespace dpinfer::launcher {

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

}  // namespace dpinfer::launcher

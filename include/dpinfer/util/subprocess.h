#pragma once
// Running a short helper command (scontrol, nvidia-smi) and collecting what it says.
// The launcher's long-lived workers are another matter: launcher/worker_process.h.

#include <chrono>
#include <string>
#include <vector>

namespace dpinfer {

struct CommandResult {
  std::string error;        ///< why it could not run; empty when it ran
  bool timed_out = false;   ///< killed after the timeout
  int exit_code = -1;       ///< when it exited
  int term_signal = 0;      ///< when a signal ended it
  std::string output;       ///< stdout and stderr together, at most 64 KiB
  bool ok() const { return error.empty() && !timed_out && exit_code == 0; }
  /// Why it did not succeed, in words: "cannot run scontrol: ...", "exited with status 1", ...
  std::string describe_failure(const std::string& program, std::chrono::milliseconds timeout) const;
};

/// Runs `argv` (argv[0] looked up in PATH) with stdin from /dev/null and every signal
/// unblocked, collecting its output; kills it with SIGKILL after `timeout`.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace dpinfer

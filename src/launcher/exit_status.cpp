#include "dpinfer/launcher/exit_status.h"

#include <sys/wait.h>

#include <csignal>
#include <cstring>

namespace dpinfer::launcher {

Termination Termination::from_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return killed(WTERMSIG(wait_status));
  if (WIFEXITED(wait_status)) return exited(WEXITSTATUS(wait_status));
  return exited(exit_status::kLauncherError);  // stopped/continued are never passed here
}

std::string Termination::describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  return "signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
}

std::string signal_name(int signal) {
  // sigabbrev_np needs glibc 2.32; Debian 12 has 2.36.
  if (const char* abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

}  // namespace dpinfer::launcher

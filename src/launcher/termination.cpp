#include "dpinfer/launcher/termination.h"

#include <sys/wait.h>

#include "dpinfer/util/signal_names.h"

namespace dpinfer::launcher {

Termination Termination::from_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return killed(WTERMSIG(wait_status));
  if (WIFEXITED(wait_status)) return exited(WEXITSTATUS(wait_status));
  return exited(exit_status::kFailure);  // stopped/continued are never passed here
}

std::string Termination::describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  return "signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
}

}  // namespace dpinfer::launcher

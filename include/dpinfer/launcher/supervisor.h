#pragma once
// Runs one attempt of the worker group to its end and says how it ended.
//
// The policy, which is stricter than torchrun's (README, "Supervision"):
//  - the first worker to fail (non-zero exit or a signal; the earliest time of
//    death wins) is the root cause; every other worker gets SIGTERM, then SIGKILL
//    once the grace period is over;
//  - SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to the launcher are forwarded to
//    every worker group, with the same grace period; a second SIGINT kills at once;
//  - worker output reaches the console as whole lines prefixed "[rank N] ".
//  - the workers' progress reports become one aggregated line on stderr (progress.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/launcher/launch_options.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/launcher/worker_process.h"

namespace dpinfer::launcher {

/// One worker to start: its ranks and how to run it.
struct RankSpec {
  int local_rank = 0;
  int rank = 0;
  SpawnSpec spawn;
};

/// How one worker ended.
struct RankOutcome {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  Termination termination;
  bool signaled_by_launcher = false;  ///< it got SIGTERM/SIGKILL from us before it ended
  std::string exec_error;             ///< non-empty when exec failed
  double seconds = 0;                 ///< from start to death
  std::vector<std::string> stderr_tail;
  std::vector<std::string> stdout_tail;
};

struct AttemptResult {
  std::vector<RankOutcome> ranks;  ///< by local rank
  std::optional<size_t> root_cause;  ///< index into ranks
  int interrupted_by = 0;            ///< the signal the launcher got, or 0

  bool ok() const { return !root_cause && interrupted_by == 0; }
};

/// Runs the group until every worker has ended and returns the outcome.
/// `attempt` numbers the log files (output.run_log_dir/attempt_N). Signals must
/// already be blocked (see block_launcher_signals) so that none is lost between attempts.
AttemptResult run_attempt(const std::vector<RankSpec>& ranks, const OutputOptions& output,
                          double grace_period_s, int attempt);

/// Blocks SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2/SIGCHLD for the signalfd loop, ignores
/// SIGPIPE, and makes the launcher a child subreaper so that it reaps whatever
/// its workers leave behind.
void prepare_launcher_process();

/// How many tail lines of a failed worker the summary prints.
constexpr size_t kSummaryTailLines = 20;

}  // namespace dpinfer::launcher

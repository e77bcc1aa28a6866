#pragma once
// `dpinfer launch`: resolves the options against this host, then runs the worker
// group, restarting it up to --max-restarts times, and returns the exit status.

#include <string>

#include "dpinfer/launcher/launch_options.h"
#include "dpinfer/launcher/supervisor.h"

namespace dpinfer::launcher {

/// Runs the launch to its end; returns the process exit status (README, "Exit statuses").
/// Throws UsageError, CommandError or Error before any worker has started.
int run_launch(const LaunchOptions& options);

/// The failure report of one attempt, one line per element, without prefixes.
std::vector<std::string> failure_summary(const AttemptResult& result, int attempt, int max_restarts);

/// The executable that runs `dpinfer generate`, next to this binary or in
/// ../libexec/dpinfer. Throws CommandError (127) when this build has none.
std::string find_generate_worker();

}  // namespace dpinfer::launcher

#pragma once
// The signals that stop a worker cleanly: SIGTERM (SLURM preemption, the launcher's
// teardown), SIGINT, SIGUSR1 and SIGUSR2 (SLURM's --signal). The worker finishes the
// batch in flight, flushes its manifests and exits with 128+n; a batch still running
// --stop-timeout after the signal is abandoned between two denoising steps.

#include <chrono>

namespace dpinfer::worker {

/// Installs the handlers. Only the first signal is remembered, with its time.
void install_stop_handlers();

/// The first stop signal received, or 0.
int stop_signal();

/// Whether a stop signal came at least `grace` ago: TextToImage's cancel check.
bool stopping_for_at_least(std::chrono::nanoseconds grace);

}  // namespace dpinfer::worker

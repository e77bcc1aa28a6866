#include "dpinfer/worker/worker.h"

#include <c10/util/Logging.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "dpinfer/util/error.h"
#include "dpinfer/util/exit_status.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/signal_names.h"
#include "dpinfer/util/strings.h"
#include "dpinfer/worker/generate_run.h"
#include "dpinfer/worker/stop_signals.h"

namespace dpinfer::worker {
namespace {

void setup_worker_logging(bool verbose) {
  log::setup(verbose);
  // c10d logs every failed store connect with the exception's C++ backtrace; the
  // worker reports such failures itself, in one line (and --verbose says where it
  // connects). c10's own log shows only when the user sets TORCH_CPP_LOG_LEVEL
  // (e.g. INFO). 3 is c10's FATAL.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = 3;
  // Under `dpinfer launch` every line already carries "[rank N] ".
  const char* launched = std::getenv("DPINFER_LAUNCHED");
  const char* rank = std::getenv("RANK");
  log::set_prefix(!launched && rank ? std::string("[rank ") + rank + "] " : "");
}

/// How long a rank that stops because of another one waits for its launcher's
/// SIGTERM before it exits on its own (bounded: the failed rank may hang in its teardown).
constexpr auto kWaitForTeardown = std::chrono::seconds(10);

/// Under a launcher that stops the group when one worker fails (dpinfer launch,
/// torchrun), a rank that fails only because another one did waits a while for that
/// launcher's SIGTERM. The launcher names the earliest death the root cause, and the
/// rank that failed first can take longer to die (it frees the model; LibTorch tears
/// down) than its peers take to notice and exit: they must not die first.
void wait_for_the_launchers_teardown() {
  const char* launched = std::getenv("DPINFER_LAUNCHED");
  const char* torchrun = std::getenv("TORCHELASTIC_RUN_ID");
  if (!(launched && std::string(launched) == "1") && !torchrun) return;
  const auto deadline = std::chrono::steady_clock::now() + kWaitForTeardown;
  while (!stop_signal() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

int run_generate_guarded(GenerateRun& run, const std::string& out) {
  try {
    return run.run();
  } catch (const InputError& e) {
    log::error("{}", e.what());
    run.abort(e.what());
    return exit_status::kBadInput;
  } catch (const OutOfMemory& e) {
    log::error("{}", e.what());
    run.report_progress(true);
    run.abort(e.what());
    return exit_status::kOutOfMemory;
  } catch (const WorkerGroup::Interrupted&) {
    log::warn("stopped by signal {} while waiting for the other ranks", stop_signal());
    run.report_progress(true);
    return exit_status::kSignalBase + stop_signal();
  } catch (const WorkerGroup::PeerFailed& e) {
    // Another rank failed, or rank 0's store went away: its failure is the story.
    run.report_progress(true);
    if (!stop_signal()) {
      log::error("{}", first_line(e.what()));
      wait_for_the_launchers_teardown();
    }
    if (const int sig = stop_signal()) {
      log::warn("stopped by {} ({})", signal_name(sig), first_line(e.what()));
      return exit_status::kSignalBase + sig;
    }
    return exit_status::kFailure;
  } catch (const std::exception& e) {
    std::string msg = first_line(e.what());
    if (is_disk_full(e)) {
      const bool quota = dynamic_cast<const SystemError&>(e).code() == EDQUOT;
      msg = std::string(quota ? "the disk quota" : "the disk") + " of --out " + quote(out) + " is full (" + msg +
            "); free some space or give another --out, then run the same command again: it resumes, keeping "
            "the images already made";
    }
    log::error("{}", msg);
    run.report_progress(true);
    run.abort(msg);
    return stop_signal() ? exit_status::kSignalBase + stop_signal() : exit_status::kFailure;
  }
}

}  // namespace

int run_generate(const plan::GenerateOptions& options, const PipelineFactory& make_pipeline) {
  install_stop_handlers();
  GenerateRun run(options, make_pipeline);
  const int status = run_generate_guarded(run, options.out);
  run.requeue_if_stopped(status);
  return status;
}

int generate_main(int argc, char** argv, const PipelineFactory& make_pipeline) {
  std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  try {
    std::string help;
    plan::GenerateOptions o = plan::parse_generate_args(args, &help);
    if (!help.empty()) {
      std::cout << help;
      return exit_status::kSuccess;
    }
    setup_worker_logging(o.verbose);
    if (o.dry_run) {  // as `dpinfer generate --dry-run`, which the launcher answers itself
      std::cout << o.to_json().dump(2) << "\n";
      return exit_status::kSuccess;
    }
    return run_generate(o, make_pipeline);
  } catch (const UsageError& e) {
    setup_worker_logging(false);
    log::error("{}", e.what());
    return exit_status::kBadInput;
  } catch (const std::exception& e) {
    setup_worker_logging(false);
    log::error("{}", e.what());
    return exit_status::kFailure;
  }
}

}  // namespace dpinfer::worker

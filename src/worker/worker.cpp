#include "dpinfer/worker/worker.h"

#include <c10/util/Logging.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "dpinfer/util/error.h"
#include "dpinfer/util/exit_status.h"
#include "dpinfer/util/log.h"
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

int run_generate_guarded(GenerateRun& run) {
  try {
    return run.run();
  } catch (const InputError& e) {
    log::error("{}", e.what());
    run.abort(e.what());
    return exit_status::kBadInput;
  } catch (const WorkerGroup::Interrupted&) {
    log::warn("stopped by signal {} while waiting for the other ranks", stop_signal());
    run.report_progress(true);
    return exit_status::kSignalBase + stop_signal();
  } catch (const std::exception& e) {
    const std::string msg = first_line(e.what());
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
  const int status = run_generate_guarded(run);
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

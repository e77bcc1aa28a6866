#include "dpinfer/worker/slurm_job.h"

#include <csignal>
#include <cstdlib>

#include "dpinfer/util/log.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/signal_names.h"
#include "dpinfer/util/subprocess.h"

namespace dpinfer::worker {
namespace {

/// `output` on one line, without trailing blanks.
std::string squeeze(std::string output) {
  for (char& c : output)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  while (!output.empty() && output.back() == ' ') output.pop_back();
  return output;
}

}  // namespace

SlurmJob SlurmJob::from_env() {
  return {getenv_or_empty("SLURM_JOB_ID"), getenv_or_empty("SLURM_ARRAY_JOB_ID"),
          getenv_or_empty("SLURM_ARRAY_TASK_ID"), getenv_or_empty("SLURM_RESTART_COUNT")};
}

std::string SlurmJob::describe() const {
  std::string s = "SLURM job " + job_id;
  if (array_task()) s += " (array task " + array_job_id + "_" + array_task_id + ")";
  if (!restart_count.empty()) s += ", restart " + restart_count;
  return s;
}

nlohmann::json SlurmJob::to_json() const {
  auto number_or_string = [](const std::string& v) -> nlohmann::json {
    if (v.empty()) return nullptr;
    if (v.find_first_not_of("0123456789") == std::string::npos && v.size() < 19) return std::stoll(v);
    return v;
  };
  nlohmann::json restarts = number_or_string(restart_count);
  return {{"job_id", number_or_string(job_id)},
          {"array_job_id", number_or_string(array_job_id)},
          {"array_task_id", number_or_string(array_task_id)},
          {"restart_count", restarts.is_null() ? nlohmann::json(0) : restarts}};
}

void requeue_slurm_job(const SlurmJob& job, int rank, int sig) {
  static bool done = false;
  if (done || rank != 0) return;
  if (sig != SIGTERM && sig != SIGUSR1 && sig != SIGUSR2) return;
  done = true;
  const std::string name = signal_name(sig);
  if (!job.in_job()) {
    log::warn("--requeue-on-signal: stopped by {} but not inside a SLURM job (SLURM_JOB_ID is unset); nothing to "
              "requeue",
              name);
    return;
  }
  const std::string id = job.requeue_id();
  log::info("--requeue-on-signal: stopped by {}; requeueing SLURM job {} (scontrol requeue {})", name, id, id);
  // Well inside SLURM's KillWait (30 s by default), which runs from the same signal.
  const std::chrono::seconds timeout(15);
  CommandResult r = run_command({"scontrol", "requeue", id}, timeout);
  std::string out = squeeze(r.output);
  if (r.ok()) {
    log::info("SLURM job {} requeued: it runs again (SLURM_RESTART_COUNT={}) and skips the items done so far{}", id,
              job.restart_count.empty() ? 1 : std::atoll(job.restart_count.c_str()) + 1,
              out.empty() ? "" : " (scontrol: " + out + ")");
    return;
  }
  log::error("--requeue-on-signal: could not requeue SLURM job {}: {}{}; resubmit the job to resume it", id,
             r.describe_failure("scontrol", timeout), out.empty() ? "" : ": " + out);
}

}  // namespace dpinfer::worker

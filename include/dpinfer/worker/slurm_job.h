#pragma once
// The SLURM job a worker runs in, and --requeue-on-signal.

#include <nlohmann/json.hpp>
#include <string>

namespace dpinfer::worker {

/// The SLURM job this worker runs in, from SLURM_JOB_ID and friends; empty outside SLURM.
struct SlurmJob {
  std::string job_id, array_job_id, array_task_id, restart_count;

  static SlurmJob from_env();
  bool in_job() const { return !job_id.empty(); }
  bool array_task() const { return !array_job_id.empty() && !array_task_id.empty(); }
  /// What `scontrol requeue` takes: ARRAYJOB_TASK for an array task, else the job id.
  std::string requeue_id() const { return array_task() ? array_job_id + "_" + array_task_id : job_id; }
  /// "SLURM job 123 (array task 120_2), restart 1"
  std::string describe() const;
  /// run.json's "slurm": ids as numbers where they are numbers.
  nlohmann::json to_json() const;
};

/// --requeue-on-signal: after a stop by SIGTERM, SIGUSR1 or SIGUSR2, rank 0 asks SLURM to
/// requeue `job` (or its job array task) with `scontrol requeue`, once per process. Logs
/// what happened; never throws and never changes the exit status.
void requeue_slurm_job(const SlurmJob& job, int rank, int sig);

}  // namespace dpinfer::worker

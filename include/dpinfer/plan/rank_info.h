#pragma once
// Where a worker's rank comes from. In order: torchrun's variables (RANK,
// WORLD_SIZE, ...); SLURM step variables when SLURM_STEP_ID is set; OpenMPI's
// OMPI_COMM_WORLD_*; otherwise a single process (rank 0 of 1).

#include <map>
#include <optional>
#include <string>

namespace dpinfer::plan {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  ///< "torchrun", "slurm", "openmpi" or "single"
  /// Where master_addr and master_port came from, for `-v` (e.g. "the first host of
  /// SLURM_STEP_NODELIST=gpu[01-04]; port derived from SLURM_JOB_ID=7, SLURM_STEP_ID=0").
  std::string master_from = "defaults";
};

/// Reads the rank from `env` (see above). A malformed or contradictory value
/// throws UsageError naming the variable.
RankInfo rank_info_from_env(const std::map<std::string, std::string>& env);

/// SLURM steps that set no MASTER_PORT get one derived from SLURM_JOB_ID and, when
/// set, SLURM_STEP_ID, so that every task of a step agrees without talking, while
/// concurrent jobs on a node, and concurrent steps of one job, differ. Always in
/// 15000..32767, below Linux's ephemeral port range.
int slurm_master_port(long long job_id, std::optional<long long> step_id);

/// The same from `env`'s SLURM_JOB_ID and SLURM_STEP_ID (the one derivation of the
/// workers under srun and of `dpinfer launch` inside a step); `source`, when given,
/// gets "SLURM_JOB_ID=J, SLURM_STEP_ID=S" for the log. Throws UsageError naming
/// the variable when SLURM_JOB_ID is unset or either is not an integer.
int slurm_master_port(const std::map<std::string, std::string>& env, std::string* source = nullptr);

}  // namespace dpinfer::plan

#pragma once
// Where a worker's rank comes from. In order: torchrun's variables (RANK,
// WORLD_SIZE, ...); SLURM step variables when SLURM_STEP_ID is set; OpenMPI's
// OMPI_COMM_WORLD_*; otherwise a single process (rank 0 of 1).

#include <map>
#include <string>

namespace dpinfer::worker {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  ///< "torchrun", "slurm", "openmpi" or "single"
};

/// Reads the rank from `env` (see above). A malformed or contradictory value
/// throws UsageError naming the variable.
RankInfo rank_info_from_env(const std::map<std::string, std::string>& env);

/// SLURM jobs that set no MASTER_PORT get one derived from SLURM_JOB_ID, so that
/// every task of a job agrees without talking, and concurrent jobs on a node differ.
int slurm_master_port(long long job_id);

}  // namespace dpinfer::worker

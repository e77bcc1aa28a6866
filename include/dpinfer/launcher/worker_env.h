#pragma once
// The environment each worker starts with: torchrun's variable names and meanings
// (torch/distributed/elastic/agent/server/local_elastic_agent.py, _start_workers),
// so that `env://` initialisation, accelerate's PartialState and dpinfer's own
// worker all find their rank.

#include <string>
#include <vector>

#include "dpinfer/util/process.h"

namespace dpinfer::launcher {

/// Static (non-elastic) rank arithmetic: node `node_rank` of `nnodes` runs ranks
/// node_rank*nproc .. node_rank*nproc + nproc-1.
struct RankLayout {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

/// What every worker of one attempt shares.
struct GroupEnv {
  RankLayout layout;
  std::string master_addr;
  int master_port = 0;
  std::string role = "default";
  std::string run_id = "none";
  int restart_count = 0;
  int max_restarts = 0;
  /// DPINFER_RUN_TOKEN for the workers (plan/run_token.h); empty leaves the inherited
  /// environment's, if any, and otherwise lets the workers find it in --out.
  std::string run_token;
};

using dpinfer::EnvMap;

/// The environment of local rank `local_rank`: `inherited` plus the torchrun
/// variables, which always override. OMP_NUM_THREADS (=1 with more than one
/// process per node), TORCH_NCCL_ASYNC_ERROR_HANDLING (=1) and PYTHONUNBUFFERED (=1,
/// as torchrun's `python -u`) are set only when `inherited` lacks them.
EnvMap worker_env(const EnvMap& inherited, const GroupEnv& group, int local_rank);

/// True when worker_env() will set OMP_NUM_THREADS, so the launcher can say so once.
bool sets_omp_num_threads(const EnvMap& inherited, const RankLayout& layout);

/// "KEY=VALUE" strings for execve().
std::vector<std::string> to_envp(const EnvMap& env);

}  // namespace dpinfer::launcher

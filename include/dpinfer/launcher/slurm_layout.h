#pragma once
// `dpinfer launch` started by srun, one task per node: the node layout (--nnodes,
// --node-rank, --master-addr, --master-port) comes from the SLURM step, as the
// worker's own SLURM rank discovery (worker/rank_info.h) would derive it.

#include <string>
#include <vector>

#include "dpinfer/launcher/launch_options.h"
#include "dpinfer/launcher/worker_env.h"

namespace dpinfer::launcher {

/// Inside a SLURM step (SLURM_STEP_ID set), when none of --nnodes, --node-rank and
/// --master-addr was given, fills them in `o` from the step: nnodes from
/// SLURM_STEP_NUM_NODES (else SLURM_NNODES), the node rank from SLURM_NODEID, the
/// master address from MASTER_ADDR or else the first host of SLURM_STEP_NODELIST
/// (else SLURM_JOB_NODELIST), and, unless --master-port was given, the port from
/// MASTER_PORT or else plan::slurm_master_port(env) (from SLURM_JOB_ID and
/// SLURM_STEP_ID). A one-node step keeps the single-node defaults (loopback, a free
/// port). Returns one line per decision, for the -v log; nothing outside a step.
/// Throws UsageError when the step runs more than one task on this node
/// (SLURM_STEP_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE): each would start its
/// own --nproc-per-node workers.
std::vector<std::string> apply_slurm_step(LaunchOptions& o, const EnvMap& env);

}  // namespace dpinfer::launcher

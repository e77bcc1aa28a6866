#include "dpinfer/launcher/slurm_layout.h"

#include "dpinfer/plan/env_vars.h"
#include "dpinfer/plan/rank_info.h"
#include "dpinfer/plan/slurm_nodelist.h"
#include "dpinfer/util/error.h"

namespace dpinfer::launcher {
namespace {

using plan::env_int;
using plan::find_env;

constexpr int kMaxNodes = 1 << 20;

/// The first of `keys` that is set, or nullptr; `which` gets its name.
const std::string* first_set(const EnvMap& env, std::initializer_list<const char*> keys, std::string& which) {
  for (const char* k : keys) {
    if (const std::string* v = find_env(env, k)) {
      which = k;
      return v;
    }
  }
  return nullptr;
}

/// One launcher per node: more tasks on this node means the user meant one task
/// per GPU, which is `srun dpinfer generate` without a launcher.
void check_one_task_per_node(const EnvMap& env, int node) {
  std::string var;
  const std::string* spec = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}, var);
  if (!spec) return;
  // The step's list has one entry per node ("4(x3)"); --ntasks-per-node is one
  // number for every node.
  const int tasks = var == "SLURM_NTASKS_PER_NODE" ? static_cast<int>(env_int(env, var, 1, 1 << 20))
                                                   : plan::slurm_tasks_on_node(*spec, node, var);
  if (tasks > 1)
    throw UsageError("dpinfer launch runs as one of " + std::to_string(tasks) + " SLURM tasks on this node (" + var +
                     "=" + *spec + "), and each would start its own --nproc-per-node workers; run one launcher per "
                     "node (srun --ntasks-per-node=1 dpinfer launch --nproc-per-node G ...) or one task per GPU "
                     "without the launcher (srun --ntasks-per-node=G dpinfer generate ...)");
}

}  // namespace

std::vector<std::string> apply_slurm_step(LaunchOptions& o, const EnvMap& env) {
  std::vector<std::string> why;
  const std::string* step = find_env(env, "SLURM_STEP_ID");
  if (!step) return why;
  if (o.nnodes_given || o.node_rank_given || o.master_addr_given) {
    why.push_back("inside SLURM step " + *step +
                  ", but --nnodes, --node-rank or --master-addr was given: the step's layout is not used");
    return why;
  }
  std::string nodes_var;
  const std::string* nodes_value = first_set(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, nodes_var);
  if (!nodes_value)
    throw UsageError("inside SLURM step " + *step +
                     " neither SLURM_STEP_NUM_NODES nor SLURM_NNODES is set; give --nnodes, --node-rank and "
                     "--master-addr");
  const int nnodes = static_cast<int>(env_int(env, nodes_var, 1, kMaxNodes));
  const int node = static_cast<int>(plan::env_int_or(env, "SLURM_NODEID", 0, 0, kMaxNodes));
  if (node >= nnodes)
    throw UsageError("SLURM_NODEID=" + std::to_string(node) + " must be below " + nodes_var + "=" +
                     std::to_string(nnodes) + "; give --nnodes, --node-rank and --master-addr");
  check_one_task_per_node(env, node);
  if (nnodes == 1) {
    why.push_back("inside SLURM step " + *step + " on one node (" + nodes_var + "=1): the single-node defaults apply");
    return why;
  }
  o.nnodes = nnodes;
  o.node_rank = node;
  why.push_back("nnodes " + std::to_string(nnodes) + " from " + nodes_var);
  why.push_back("node rank " + std::to_string(node) + " from SLURM_NODEID");
  if (const std::string* addr = find_env(env, "MASTER_ADDR")) {
    o.master_addr = *addr;
    why.push_back("master address " + *addr + " from MASTER_ADDR");
  } else {
    std::string list_var;
    const std::string* list = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, list_var);
    if (!list)
      throw UsageError("inside SLURM step " + *step +
                       " neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set, so node 0's host is unknown; "
                       "give --master-addr (or set MASTER_ADDR)");
    o.master_addr = plan::first_host(*list);
    why.push_back("master address " + o.master_addr + ", the first host of " + list_var + "=" + *list);
  }
  if (o.master_port) {
    why.push_back("master port " + std::to_string(*o.master_port) + " from --master-port");
  } else if (find_env(env, "MASTER_PORT")) {
    o.master_port = static_cast<int>(env_int(env, "MASTER_PORT", 1, 65535));
    why.push_back("master port " + std::to_string(*o.master_port) + " from MASTER_PORT");
  } else {
    // Every launcher of the step sees the same SLURM_JOB_ID and SLURM_STEP_ID, so the
    // nodes agree; the function is the workers' own under a plain srun.
    std::string source;
    o.master_port = plan::slurm_master_port(env, &source);
    why.push_back("master port " + std::to_string(*o.master_port) + " " + source +
                  " (as the workers derive it under srun)");
  }
  return why;
}

}  // namespace dpinfer::launcher

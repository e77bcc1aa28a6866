#include "dpinfer/launcher/worker_env.h"

#include "dpinfer/plan/run_token.h"

namespace dpinfer::launcher {

bool sets_omp_num_threads(const EnvMap& inherited, const RankLayout& layout) {
  return layout.nproc_per_node > 1 && inherited.count("OMP_NUM_THREADS") == 0;
}

EnvMap worker_env(const EnvMap& inherited, const GroupEnv& group, int local_rank) {
  EnvMap env = inherited;
  const RankLayout& l = group.layout;
  const std::string rank = std::to_string(l.global_rank(local_rank));
  const std::string world = std::to_string(l.world_size());
  env["RANK"] = rank;
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = world;
  env["LOCAL_WORLD_SIZE"] = std::to_string(l.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(l.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(l.nnodes);
  // One role, so role ranks equal global ranks (as torchrun with a single role).
  env["ROLE_NAME"] = group.role;
  env["ROLE_RANK"] = rank;
  env["ROLE_WORLD_SIZE"] = world;
  env["MASTER_ADDR"] = group.master_addr;
  env["MASTER_PORT"] = std::to_string(group.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(group.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(group.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = group.run_id;
  // Workers host their own store (rank 0), as under torchrun's static rendezvous.
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  if (!group.run_token.empty()) env[plan::kRunTokenEnv] = group.run_token;
  // Tells dpinfer's own worker that its lines get "[rank N] " from the launcher.
  env["DPINFER_LAUNCHED"] = "1";
  if (sets_omp_num_threads(inherited, l)) env["OMP_NUM_THREADS"] = "1";
  env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  // torchrun runs `python -u`: without it a Python worker's print() reaches the pipe
  // only when its 8 KiB buffer fills or the worker exits.
  env.emplace("PYTHONUNBUFFERED", "1");
  return env;
}

std::vector<std::string> to_envp(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace dpinfer::launcher

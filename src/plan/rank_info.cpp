#include "dpinfer/plan/rank_info.h"

#include <optional>

#include "dpinfer/plan/env_vars.h"
#include "dpinfer/plan/slurm_nodelist.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {
namespace {

using Env = EnvVars;

long long int_var(const Env& env, const std::string& key, long long min, long long max) {
  return env_int(env, key, min, max);
}

int int_var_or(const Env& env, const std::string& key, int fallback, int min, int max) {
  return static_cast<int>(env_int_or(env, key, fallback, min, max));
}

const std::string* find(const Env& env, const std::string& key) { return find_env(env, key); }

void check(const RankInfo& r, const std::string& rank_var, const std::string& world_var) {
  if (r.rank >= r.world_size)
    throw UsageError(rank_var + "=" + std::to_string(r.rank) + " must be below " + world_var + "=" +
                     std::to_string(r.world_size));
  if (r.local_rank >= r.local_world_size)
    throw UsageError("local rank " + std::to_string(r.local_rank) + " must be below the local world size " +
                     std::to_string(r.local_world_size));
}

}  // namespace

int slurm_master_port(long long job_id, std::optional<long long> step_id) {
  // Ports 15000..32767: above the common service ports, below Linux's default
  // ephemeral range (net.ipv4.ip_local_port_range 32768-60999), where a connect()
  // elsewhere on the node may hold the port. The job id alone (the former
  // 15000 + id % 20000) gave two concurrent srun steps of one job the same port, and
  // reached into the ephemeral range. Steps are spread by a multiple of ~kCount/phi, so
  // the first steps of a job land far from each other and from the neighbouring job
  // ids that share a node at the same time; consecutive job ids still differ.
  constexpr long long kFirst = 15000, kCount = 32768 - kFirst, kStepStride = 10981;  // coprime to kCount
  const long long job = job_id % kCount, step = step_id ? (*step_id % kCount) * kStepStride % kCount : 0;
  return static_cast<int>(kFirst + (job + step) % kCount);
}

int slurm_master_port(const Env& env, std::string* source) {
  const long long job = int_var(env, "SLURM_JOB_ID", 0, 1LL << 62);
  std::optional<long long> step;
  if (find(env, "SLURM_STEP_ID")) step = int_var(env, "SLURM_STEP_ID", 0, 1LL << 62);
  if (source)
    *source = "derived from SLURM_JOB_ID=" + std::to_string(job) +
              (step ? ", SLURM_STEP_ID=" + std::to_string(*step) : "");
  return slurm_master_port(job, step);
}

RankInfo rank_info_from_env(const Env& env) {
  constexpr int kMaxWorld = 1 << 22;
  RankInfo r;
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) {
    r.source = "torchrun";
    r.world_size = static_cast<int>(int_var(env, "WORLD_SIZE", 1, kMaxWorld));
    r.rank = static_cast<int>(int_var(env, "RANK", 0, kMaxWorld));
    r.local_world_size = int_var_or(env, "LOCAL_WORLD_SIZE", r.world_size, 1, kMaxWorld);
    r.local_rank = int_var_or(env, "LOCAL_RANK", r.rank % r.local_world_size, 0, kMaxWorld);
    if (const std::string* a = find(env, "MASTER_ADDR")) r.master_addr = *a;
    else if (r.world_size > 1) throw UsageError("MASTER_ADDR is not set but WORLD_SIZE > 1; set it to rank 0's host");
    if (find(env, "MASTER_PORT")) r.master_port = static_cast<int>(int_var(env, "MASTER_PORT", 1, 65535));
    else if (r.world_size > 1) throw UsageError("MASTER_PORT is not set but WORLD_SIZE > 1; set it to a free port on rank 0's host");
    r.master_from = "MASTER_ADDR, MASTER_PORT";
    check(r, "RANK", "WORLD_SIZE");
    return r;
  }
  if (find(env, "SLURM_STEP_ID")) {
    r.source = "slurm";
    r.world_size = static_cast<int>(int_var(env, "SLURM_NTASKS", 1, kMaxWorld));
    r.rank = static_cast<int>(int_var(env, "SLURM_PROCID", 0, kMaxWorld));
    r.local_rank = static_cast<int>(int_var(env, "SLURM_LOCALID", 0, kMaxWorld));
    r.local_world_size = r.local_rank + 1;
    if (const std::string* per_node = find(env, "SLURM_STEP_TASKS_PER_NODE")) {
      int node = int_var_or(env, "SLURM_NODEID", 0, 0, kMaxWorld);
      int n = slurm_tasks_on_node(*per_node, node);
      if (n <= r.local_rank)
        throw UsageError("SLURM_STEP_TASKS_PER_NODE=" + quote(*per_node, 60) + " gives node " + std::to_string(node) + " " +
                         std::to_string(n) + " task(s), but SLURM_LOCALID=" + std::to_string(r.local_rank));
      r.local_world_size = n;
    }
    if (const std::string* a = find(env, "MASTER_ADDR")) {
      r.master_addr = *a;
      r.master_from = "MASTER_ADDR";
    } else {
      const char* var = find(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
      const std::string* nodes = find(env, var);
      if (!nodes) throw UsageError("SLURM_JOB_NODELIST is not set, so rank 0's host is unknown; set MASTER_ADDR");
      r.master_addr = first_host(*nodes);
      r.master_from = std::string("the first host of ") + var + "=" + *nodes;
    }
    if (find(env, "MASTER_PORT")) {
      r.master_port = static_cast<int>(int_var(env, "MASTER_PORT", 1, 65535));
      r.master_from += "; MASTER_PORT";
    } else {
      std::string port_from;
      r.master_port = slurm_master_port(env, &port_from);
      r.master_from += "; port " + port_from;
    }
    check(r, "SLURM_PROCID", "SLURM_NTASKS");
    return r;
  }
  if (find(env, "OMPI_COMM_WORLD_RANK")) {
    r.source = "openmpi";
    r.world_size = static_cast<int>(int_var(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxWorld));
    r.rank = static_cast<int>(int_var(env, "OMPI_COMM_WORLD_RANK", 0, kMaxWorld));
    r.local_rank = int_var_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, kMaxWorld);
    r.local_world_size = int_var_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", r.local_rank + 1, 1, kMaxWorld);
    if (const std::string* a = find(env, "MASTER_ADDR")) r.master_addr = *a;
    else if (r.world_size > 1) throw UsageError("under mpirun set MASTER_ADDR to rank 0's host (e.g. mpirun -x MASTER_ADDR=...)");
    r.master_port = int_var_or(env, "MASTER_PORT", 29500, 1, 65535);
    check(r, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    return r;
  }
  return r;
}

}  // namespace dpinfer::plan

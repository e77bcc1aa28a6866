#include <gtest/gtest.h>

#include "dpinfer/launcher/worker_env.h"

using namespace dpinfer::launcher;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
GroupEnv group(int nnodes, int node_rank, int nproc) {
  GroupEnv g;
  g.layout = {nnodes, node_rank, nproc};
  g.master_addr = "10.1.2.3";
  g.master_port = 29555;
  g.run_id = "job7";
  g.restart_count = 2;
  g.max_restarts = 5;
  return g;
}

TEST(RankLayout, GlobalRanksFollowNodeRank) {
  RankLayout l{3, 2, 4};
  EXPECT_EQ(l.world_size(), 12);
  EXPECT_EQ(l.global_rank(0), 8);
  EXPECT_EQ(l.global_rank(3), 11);
}

TEST(WorkerEnv, SetsTheTorchrunVariables) {
  EnvMap env = worker_env({{"PATH", "/bin"}}, group(2, 1, 4), 3);
  EXPECT_EQ(env["RANK"], "7");
  EXPECT_EQ(env["LOCAL_RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["ROLE_RANK"], "7");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "8");
  EXPECT_EQ(env["MASTER_ADDR"], "10.1.2.3");
  EXPECT_EQ(env["MASTER_PORT"], "29555");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "5");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
  EXPECT_EQ(env["PATH"], "/bin");
}

TEST(WorkerEnv, OmpThreadsDefaultsToOneOnlyWithSeveralProcessesAndWhenUnset) {
  EXPECT_EQ(worker_env({}, group(1, 0, 2), 0)["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(worker_env({}, group(1, 0, 1), 0).count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(worker_env({{"OMP_NUM_THREADS", "6"}}, group(1, 0, 2), 0)["OMP_NUM_THREADS"], "6");
  EXPECT_TRUE(sets_omp_num_threads({}, {1, 0, 2}));
  EXPECT_FALSE(sets_omp_num_threads({{"OMP_NUM_THREADS", "6"}}, {1, 0, 2}));
}

TEST(WorkerEnv, NcclAsyncErrorHandlingDefaultsToOneWhenUnset) {
  EXPECT_EQ(worker_env({}, group(1, 0, 1), 0)["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(worker_env({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}}, group(1, 0, 1), 0)["TORCH_NCCL_ASYNC_ERROR_HANDLING"],
            "0");
}

TEST(WorkerEnv, LauncherVariablesOverrideInheritedOnes) {
  EnvMap env = worker_env({{"RANK", "99"}, {"WORLD_SIZE", "99"}}, group(1, 0, 2), 1);
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "2");
}

TEST(WorkerEnv, EnvpIsKeyEqualsValue) {
  auto envp = to_envp({{"A", "1"}, {"B", "x=y"}});
  EXPECT_EQ(envp, (std::vector<std::string>{"A=1", "B=x=y"}));
}

// Issue 11, item 17: torchrun runs `python -u`; without it a Python worker's print()
// reaches the launcher only when its buffer fills or the worker exits.
TEST(WorkerEnv, PythonUnbufferedDefaultsToOneWhenUnset) {
  EXPECT_EQ(worker_env({}, group(1, 0, 1), 0)["PYTHONUNBUFFERED"], "1");
  EXPECT_EQ(worker_env({{"PYTHONUNBUFFERED", ""}}, group(1, 0, 1), 0)["PYTHONUNBUFFERED"], "")
      << "the user's own setting, even empty, is kept";
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

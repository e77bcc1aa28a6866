// `dpinfer launch` under srun, one task per node: the layout from the step's
// variables (launcher/slurm_layout.h), with fake environments.
#include <gtest/gtest.h>

#include "dpinfer/launcher/slurm_layout.h"
#include "dpinfer/launcher/worker_env.h"
#include "dpinfer/plan/rank_info.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using namespace dpinfer::launcher;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// What srun -N3 --ntasks-per-node=1 gives the task on node `node` of job 4242.
EnvMap step_env(int node) {
  return {{"SLURM_JOB_ID", "4242"},          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_NODES", "3"},     {"SLURM_NNODES", "3"},
          {"SLURM_NODEID", std::to_string(node)}, {"SLURM_PROCID", std::to_string(node)},
          {"SLURM_NTASKS", "3"},             {"SLURM_LOCALID", "0"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}, {"SLURM_STEP_NODELIST", "gpu[07-09]"},
          {"SLURM_JOB_NODELIST", "gpu[01-09]"}};
}

LaunchOptions defaults() {
  LaunchOptions o;
  o.nproc_per_node = "4";
  o.worker_args = {"--", "true"};
  return o;
}

std::string error_of(LaunchOptions o, const EnvMap& env) {
  try {
    apply_slurm_step(o, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}


TEST(SlurmLayout, NothingChangesOutsideAStep) {
  LaunchOptions o = defaults();
  EnvMap env = step_env(1);
  env.erase("SLURM_STEP_ID");  // the batch script itself, or no SLURM at all
  EXPECT_TRUE(apply_slurm_step(o, env).empty());
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_FALSE(o.master_port.has_value());
}

TEST(SlurmLayout, TheStepGivesNodesRankMasterAndPort) {
  LaunchOptions o = defaults();
  std::vector<std::string> why = apply_slurm_step(o, step_env(2));
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "gpu07");  // the step's first host, not the job's
  ASSERT_TRUE(o.master_port.has_value());
  EXPECT_EQ(*o.master_port, plan::slurm_master_port(4242, 0));
  o.validate();
  std::string all;
  for (const auto& l : why) all += l + "\n";
  EXPECT_NE(all.find("nnodes 3 from SLURM_STEP_NUM_NODES"), std::string::npos) << all;
  EXPECT_NE(all.find("node rank 2 from SLURM_NODEID"), std::string::npos) << all;
  EXPECT_NE(all.find("first host of SLURM_STEP_NODELIST=gpu[07-09]"), std::string::npos) << all;
  EXPECT_NE(all.find("SLURM_JOB_ID=4242"), std::string::npos) << all;
}

TEST(SlurmLayout, JobLevelVariablesWhenTheStepOnesAreMissing) {
  LaunchOptions o = defaults();
  EnvMap env = step_env(1);
  env.erase("SLURM_STEP_NUM_NODES");
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  apply_slurm_step(o, env);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.master_addr, "gpu01");
}

TEST(SlurmLayout, ExplicitFlagsAndMasterVariablesWin) {
  // Any of --nnodes/--node-rank/--master-addr: the step's layout is not used at all.
  LaunchOptions o = defaults();
  o.master_addr = "10.0.0.1";
  o.master_addr_given = true;
  apply_slurm_step(o, step_env(1));
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  // --master-port alone keeps the rest of the step's layout.
  o = defaults();
  o.master_port = 23456;
  apply_slurm_step(o, step_env(1));
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(*o.master_port, 23456);
  // MASTER_ADDR / MASTER_PORT in the environment, as the worker reads them under srun.
  o = defaults();
  EnvMap env = step_env(0);
  env["MASTER_ADDR"] = "head";
  env["MASTER_PORT"] = "31000";
  apply_slurm_step(o, env);
  EXPECT_EQ(o.master_addr, "head");
  EXPECT_EQ(*o.master_port, 31000);
}

TEST(SlurmLayout, AOneNodeStepKeepsTheSingleNodeDefaults) {
  LaunchOptions o = defaults();
  EnvMap env = step_env(0);
  env["SLURM_STEP_NUM_NODES"] = "1";
  env["SLURM_STEP_TASKS_PER_NODE"] = "1";
  apply_slurm_step(o, env);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_FALSE(o.master_port.has_value());  // a free port, as without SLURM
}

TEST(SlurmLayout, SeveralTasksOnANodeIsAMisuse) {
  EnvMap env = step_env(1);
  env["SLURM_STEP_TASKS_PER_NODE"] = "4(x3)";  // srun --ntasks-per-node=4 dpinfer launch
  std::string e = error_of(defaults(), env);
  EXPECT_NE(e.find("one of 4 SLURM tasks on this node (SLURM_STEP_TASKS_PER_NODE=4(x3))"), std::string::npos) << e;
  EXPECT_NE(e.find("srun --ntasks-per-node=G dpinfer generate"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one line";
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env["SLURM_NTASKS_PER_NODE"] = "2";
  EXPECT_NE(error_of(defaults(), env).find("SLURM_NTASKS_PER_NODE=2"), std::string::npos);
  // Uneven steps: only this node's count matters.
  env = step_env(2);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2),1";
  EXPECT_EQ(error_of(defaults(), env), "");
}

TEST(SlurmLayout, BadStepVariablesAreNamed) {
  EnvMap env = step_env(1);
  env["SLURM_NODEID"] = "5";
  EXPECT_NE(error_of(defaults(), env).find("SLURM_NODEID=5 must be below SLURM_STEP_NUM_NODES=3"), std::string::npos);
  env = step_env(1);
  env["SLURM_STEP_NUM_NODES"] = "two";
  EXPECT_NE(error_of(defaults(), env).find("SLURM_STEP_NUM_NODES='two'"), std::string::npos);
}

// The launcher's workers inherit the SLURM variables but also get torchrun's,
// which come first in the worker's rank discovery: they see the launcher's ranks.
TEST(SlurmLayout, WorkersOfASteppedLauncherTakeTheTorchrunRanks) {
  LaunchOptions o = defaults();
  const EnvMap env = step_env(1);
  apply_slurm_step(o, env);
  GroupEnv g;
  g.layout = {o.nnodes, o.node_rank, 4};
  g.master_addr = o.master_addr;
  g.master_port = *o.master_port;
  for (int local = 0; local < 4; ++local) {
    plan::RankInfo r = plan::rank_info_from_env(worker_env(env, g, local));
    EXPECT_EQ(r.source, "torchrun");
    EXPECT_EQ(r.rank, 4 + local);
    EXPECT_EQ(r.world_size, 12);
    EXPECT_EQ(r.local_rank, local);
    EXPECT_EQ(r.local_world_size, 4);
    EXPECT_EQ(r.master_addr, "gpu07");
    EXPECT_EQ(r.master_port, plan::slurm_master_port(4242, 0));
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

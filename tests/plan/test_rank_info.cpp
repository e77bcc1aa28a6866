#include <gtest/gtest.h>

#include "dpinfer/plan/rank_info.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using namespace dpinfer::plan;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    rank_info_from_env(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RankInfo, SingleProcessWithoutAnyVariables) {
  RankInfo r = rank_info_from_env({});
  EXPECT_EQ(r.source, "single");
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.world_size, 1);
}

TEST(RankInfo, TorchrunVariablesComeFirst) {
  RankInfo r = rank_info_from_env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                   {"MASTER_ADDR", "h0"}, {"MASTER_PORT", "1234"}, {"SLURM_STEP_ID", "0"},
                                   {"SLURM_PROCID", "9"}, {"OMPI_COMM_WORLD_RANK", "8"}});
  EXPECT_EQ(r.source, "torchrun");
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.master_addr, "h0");
  EXPECT_EQ(r.master_port, 1234);
}

TEST(RankInfo, SlurmStepVariablesWithTheFirstHostAsMaster) {
  RankInfo r = rank_info_from_env({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"},
                                   {"SLURM_LOCALID", "1"}, {"SLURM_JOB_NODELIST", "gpu[03-04]"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "1"},
                                   {"SLURM_JOB_ID", "123456"}});
  EXPECT_EQ(r.source, "slurm");
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_world_size, 4);
  EXPECT_EQ(r.master_addr, "gpu03");
  EXPECT_EQ(r.master_port, slurm_master_port(123456, 0));
}

TEST(RankInfo, SlurmBatchScriptContextIsNotAStep) {
  // Without SLURM_STEP_ID (the sbatch script itself), SLURM_PROCID is not a rank.
  RankInfo r = rank_info_from_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_ID", "1"}});
  EXPECT_EQ(r.source, "single");
}

TEST(RankInfo, OpenMpiVariables) {
  RankInfo r = rank_info_from_env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                                   {"MASTER_ADDR", "m"}});
  EXPECT_EQ(r.source, "openmpi");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 3);
}

TEST(RankInfo, MalformedValuesNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}).find("RANK=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "99999"}})
                .find("MASTER_PORT='99999'"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}}).find("SLURM_NTASKS"),
            std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

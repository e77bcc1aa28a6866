// Values a SLURM job or a user hands the worker: the derived store port
// (plan::slurm_master_port), host lists (plan::expand_nodelist, first_host)
// and --shard I/N (plan::parse_outer_shard).
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "dpinfer/launcher/slurm_layout.h"
#include "dpinfer/plan/rank_info.h"
#include "dpinfer/plan/sharding.h"
#include "dpinfer/plan/slurm_nodelist.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using namespace dpinfer::plan;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string error_of(void (*f)(const std::string&), const std::string& arg) {
  try {
    f(arg);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void shard(const std::string& s) { parse_outer_shard(s); }
void expand(const std::string& s) { expand_nodelist(s); }


TEST(SlurmMasterPort, StaysBelowTheEphemeralRange) {
  for (long long job : {0LL, 1LL, 17767LL, 17768LL, 20000LL, 32767LL, 999999LL, (1LL << 62) - 1})
    for (long long step : {0LL, 1LL, 2LL, 4294967290LL, 4294967294LL, 4294967295LL}) {
      const int p = slurm_master_port(job, step);
      EXPECT_GE(p, 15000) << job << "." << step;
      EXPECT_LE(p, 32767) << job << "." << step;
    }
  EXPECT_GE(slurm_master_port(17767, std::nullopt), 15000);
  EXPECT_LE(slurm_master_port(17767, std::nullopt), 32767);
}

TEST(SlurmMasterPort, JobsTwentyThousandApartAndStepsOfOneJobDiffer) {
  // The former 15000 + id % 20000 gave these the same port, and 35000 for job 20000.
  EXPECT_NE(slurm_master_port(4242, 0), slurm_master_port(24242, 0));
  // Concurrent steps of one job, and of neighbouring jobs on the same node.
  std::set<int> ports;
  for (long long job = 1000; job < 1008; ++job)
    for (long long step = 0; step < 8; ++step) ports.insert(slurm_master_port(job, step));
  EXPECT_EQ(ports.size(), 64u);
}

TEST(SlurmMasterPort, FromTheEnvironmentEveryRankOfAStepAgrees) {
  const std::map<std::string, std::string> a = {{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", "0"}};
  const std::map<std::string, std::string> b = {{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", "7"}};
  std::string source;
  EXPECT_EQ(slurm_master_port(a, &source), slurm_master_port(4242, 3));
  EXPECT_EQ(source, "derived from SLURM_JOB_ID=4242, SLURM_STEP_ID=3");
  EXPECT_EQ(slurm_master_port(b), slurm_master_port(a));
  EXPECT_NE(slurm_master_port({{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "4"}}), slurm_master_port(a));
  EXPECT_EQ(slurm_master_port({{"SLURM_JOB_ID", "4242"}}, &source), slurm_master_port(4242, std::nullopt));
  EXPECT_EQ(source, "derived from SLURM_JOB_ID=4242");
  EXPECT_THROW(slurm_master_port({{"SLURM_STEP_ID", "0"}}), UsageError);
  EXPECT_THROW(slurm_master_port({{"SLURM_JOB_ID", "1"}, {"SLURM_STEP_ID", "x"}}), UsageError);
}

TEST(SlurmMasterPort, WorkersUnderSrunAndLaunchersOfTheStepDeriveTheSamePort) {
  std::map<std::string, std::string> env = {
      {"SLURM_JOB_ID", "4242"},         {"SLURM_STEP_ID", "2"},   {"SLURM_PROCID", "0"},
      {"SLURM_NTASKS", "2"},            {"SLURM_LOCALID", "0"},   {"SLURM_NODEID", "0"},
      {"SLURM_STEP_NUM_NODES", "2"},    {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
      {"SLURM_STEP_NODELIST", "gpu[07-08]"}};
  const RankInfo r = rank_info_from_env(env);
  launcher::LaunchOptions o;
  o.nproc_per_node = "4";
  o.worker_args = {"--", "true"};
  std::vector<std::string> why = launcher::apply_slurm_step(o, env);
  ASSERT_TRUE(o.master_port.has_value());
  EXPECT_EQ(*o.master_port, r.master_port);
  EXPECT_EQ(r.master_port, slurm_master_port(4242, 2));
  std::string all;
  for (const auto& l : why) all += l + "\n";
  EXPECT_NE(all.find("derived from SLURM_JOB_ID=4242, SLURM_STEP_ID=2"), std::string::npos) << all;
}

TEST(SlurmNodelist, FirstHostWithoutExpandingTheCrossProduct) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(first_host("a[0-999999]b[0-999]"), "a0b0");  // 10^9 names if expanded
  EXPECT_EQ(first_host("gpu[07-09,11]-r[003-004],cpu[1-2]"), "gpu07-r003");
  EXPECT_EQ(first_host("node1,node2"), "node1");
  EXPECT_EQ(first_host("n[8-10]"), "n8");
  EXPECT_EQ(first_host(" n[08-10] "), "n08");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  for (const char* list : {"gpu[01-04,07],cpu-a[1-2]", "rack[1-2]-n[1,3]", "a,b[2],c", "x[5]y"})
    EXPECT_EQ(first_host(list), expand_nodelist(list).front()) << list;
  // The whole list is checked, as expand_nodelist does.
  for (const char* bad : {"", "n[1-", "n[2-1]", "n]1[", "n[x]", "a,,b", "a,n[2-1]", "n[0-1000001]"})
    EXPECT_THROW(first_host(bad), Error) << bad;
}

TEST(SlurmNodelist, FullExpansionIsCappedWithAClearError) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of(expand, "a[0-999999]b[0-999]");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(e, "cannot parse SLURM host list 'a[0-999999]b[0-999]': it names more than 1048576 hosts; check the "
               "variable, or set MASTER_ADDR to rank 0's host");
  EXPECT_THROW(expand_nodelist("a[0-999999],b[0-999999]"), Error);  // the sum over names counts too
  const std::vector<std::string> all = expand_nodelist("n[0-1023]m[0-1023]");  // exactly the cap
  EXPECT_EQ(all.size(), kMaxNodelistHosts);
  EXPECT_EQ(all.back(), "n1023m1023");
  EXPECT_THROW(expand_nodelist("n[0-1023]m[0-1023],x"), Error);  // one past it
  // Existing behaviour: padding, several groups, suffixes, order.
  EXPECT_EQ(expand_nodelist("r[1-2]-n[08-09]x"), (std::vector<std::string>{"r1-n08x", "r1-n09x", "r2-n08x", "r2-n09x"}));
  EXPECT_EQ(error_of(expand, "n[2-1]"), "cannot parse SLURM host list 'n[2-1]': range '2-1' goes backwards");
}

TEST(OuterShard, OnlyPlainDigits) {
  for (const char* bad : {" 1/3", "1 /3", "1/ 3", "1/3 ", "+1/3", "1/+3", "01/3", "1/03", "00/3", "-0/3", "1/3x",
                          "0x1/3", "1e0/3", "", "/", "1/", "/3"})
    EXPECT_NE(error_of(shard, bad).find("plain decimal digits"), std::string::npos) << "'" << bad << "'";
  EXPECT_EQ(parse_outer_shard("0/1").index, 0);
  EXPECT_EQ(parse_outer_shard("10/11").index, 10);
  EXPECT_EQ(parse_outer_shard("999999/1000000").count, 1000000);
  EXPECT_NE(error_of(shard, "3/3").find("0 <= I < N"), std::string::npos);
  EXPECT_NE(error_of(shard, "0/0").find("0 <= I < N"), std::string::npos);
}

TEST(OuterShard, TheCapHasItsOwnMessage) {
  for (const char* over : {"1/1000001", "0/99999999999", "0/99999999999999999999999"}) {
    const std::string e = error_of(shard, over);
    EXPECT_NE(e.find("N may be at most 1000000"), std::string::npos) << over << ": " << e;
    EXPECT_EQ(e.find("0 <= I < N"), std::string::npos) << over << ": " << e;
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

#include <gtest/gtest.h>

#include "dpinfer/cli/cli.h"
#include "dpinfer/launcher/launch_options.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using dpinfer::cli::parse_launch_args;
using dpinfer::launcher::resolve_nproc_per_node;

namespace {
/// The UsageError message of parsing `args`, or "" when it parses.
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_launch_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(LaunchOptions, ParsesTorchrunStyleOptionsAndTheCommand) {
  auto o = parse_launch_args({"--nproc-per-node", "3", "--nnodes", "2", "--node-rank", "1", "--master-addr", "h0",
                              "--master-port", "29600", "--max-restarts", "2", "--grace-period", "1.5", "--run-id",
                              "r1", "--", "python", "-u", "train.py", "--lr", "1"});
  EXPECT_EQ(o.nproc_per_node, "3");
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "h0");
  EXPECT_EQ(*o.master_port, 29600);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_DOUBLE_EQ(o.grace_period_s, 1.5);
  EXPECT_EQ(o.run_id, "r1");
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"--", "python", "-u", "train.py", "--lr", "1"}));
}

TEST(LaunchOptions, UnderscoreSpellingsOfTorchrunAreAccepted) {
  auto o = parse_launch_args({"--nproc_per_node", "2", "--master_port", "1234", "--", "true"});
  EXPECT_EQ(o.nproc_per_node, "2");
  EXPECT_EQ(*o.master_port, 1234);
}

TEST(LaunchOptions, PromptsFormKeepsGenerateOptionsForTheWorker) {
  auto o = parse_launch_args({"--nproc-per-node", "2", "prompts.txt", "--steps", "20", "--seed", "5"});
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"prompts.txt", "--steps", "20", "--seed", "5"}));
}

TEST(LaunchOptions, DefaultsMatchTheReadme) {
  auto o = parse_launch_args({"--", "true"});
  EXPECT_EQ(o.nproc_per_node, "1");
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_FALSE(o.master_port.has_value());
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_DOUBLE_EQ(o.grace_period_s, 30.0);
}

TEST(LaunchOptions, BadValuesAreUsageErrorsNamingTheOption) {
  EXPECT_NE(usage_error({"--nproc-per-node", "0", "--", "true"}).find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(usage_error({"--master-port", "-1", "--", "true"}).find("--master-port"), std::string::npos);
  EXPECT_NE(usage_error({"--master-port", "70000", "--", "true"}).find("0..65535"), std::string::npos);
  EXPECT_NE(usage_error({"--node-rank", "2", "--nnodes", "2", "--", "true"}).find("--node-rank"), std::string::npos);
  EXPECT_NE(usage_error({"--nnodes", "1:4", "--", "true"}).find("elastic"), std::string::npos);
  EXPECT_NE(usage_error({"--max-restarts", "-1", "--", "true"}).find("--max-restarts"), std::string::npos);
  EXPECT_NE(usage_error({"--grace-period", "-2", "--", "true"}).find("--grace-period"), std::string::npos);
  EXPECT_NE(usage_error({"--tee", "--", "true"}).find("--log-dir"), std::string::npos);
  EXPECT_NE(usage_error({"--local-ranks-filter", "0,x", "--", "true"}).find("--local-ranks-filter"),
            std::string::npos);
  EXPECT_NE(usage_error({"--bogus", "--", "true"}).find("unknown launch option '--bogus'"), std::string::npos);
  EXPECT_NE(usage_error({}).find("nothing to launch"), std::string::npos);
  EXPECT_NE(usage_error({"--"}).find("nothing to launch"), std::string::npos);
}

TEST(LaunchOptions, RunIdMustBeOnePathComponent) {
  for (const char* id : {"../../x", "a/b", ".", "..", ".hidden", ""})
    EXPECT_NE(usage_error({"--run-id", id, "--", "true"}).find("--run-id"), std::string::npos) << id;
  EXPECT_EQ(parse_launch_args({"--run-id", "job-1.a_b", "--", "true"}).run_id, "job-1.a_b");
}

TEST(LaunchOptions, StandaloneIsAcceptedAndChangesNothing) {
  auto o = parse_launch_args({"--standalone", "--nproc-per-node", "2", "--", "true"});
  EXPECT_EQ(o.nproc_per_node, "2");
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"--", "true"}));
  EXPECT_FALSE(o.master_port.has_value());
}

// torchrun's --tee 3 / --redirects 3 select streams; CLI11 would otherwise take the
// number for PROMPTS (or --tee=3 for a set flag).
TEST(LaunchOptions, TorchrunsTeeAndRedirectsValuesGetAHint) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--tee", "3", "--", "true"},
           {"--log-dir", "d", "--tee", "3", "prompts.txt"},
           {"--log-dir", "d", "-t", "0:1,1:2", "--", "true"},
           {"--tee=3", "--log-dir", "d", "--", "true"},
           {"--tee=0", "--", "true"}}) {
    std::string e = usage_error(args);
    EXPECT_NE(e.find("--tee is a flag with no value"), std::string::npos) << args[0] << ": " << e;
    EXPECT_NE(e.find("unless --quiet"), std::string::npos) << e;
  }
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--redirects", "3", "--", "true"}, {"-r", "3", "prompts.txt"}, {"--redirects=3", "--", "true"}}) {
    std::string e = usage_error(args);
    EXPECT_NE(e.find("dpinfer does not have"), std::string::npos) << args[0] << ": " << e;
    EXPECT_NE(e.find("unless --quiet"), std::string::npos) << e;
  }
  // A prompts file after --tee is still one.
  EXPECT_EQ(parse_launch_args({"--log-dir", "d", "--tee", "prompts.txt"}).worker_args,
            (std::vector<std::string>{"prompts.txt"}));
  EXPECT_EQ(parse_launch_args({"--tee", "--log-dir", "d", "3"}).worker_args, (std::vector<std::string>{"3"}));
}

TEST(NprocPerNode, BoundedByTheOpenFileLimit) {
  EXPECT_EQ(launcher::max_nproc_for_fd_limit(1024), (1024 - launcher::kLauncherOwnFds) / launcher::kFdsPerWorker);
  EXPECT_EQ(launcher::max_nproc_for_fd_limit(10), 0);
  EXPECT_GT(launcher::max_nproc_for_fd_limit(-1), 1000000);
  EXPECT_NO_THROW(launcher::check_nproc_fits_fd_limit(8, 1024));
  EXPECT_NO_THROW(launcher::check_nproc_fits_fd_limit(100000, -1));
  try {
    launcher::check_nproc_fits_fd_limit(100000, 1024);
    FAIL() << "100000 workers fit in 1024 descriptors";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--nproc-per-node 100000"), std::string::npos) << m;
    EXPECT_NE(m.find("1024"), std::string::npos) << m;
    EXPECT_NE(m.find("ulimit -n"), std::string::npos) << m;
  }
}

TEST(LaunchOptions, NnodesAcceptsTorchrunsEqualRange) {
  EXPECT_EQ(parse_launch_args({"--nnodes", "2:2", "--", "true"}).nnodes, 2);
}

TEST(NprocPerNode, ResolvesKeywords) {
  EXPECT_EQ(resolve_nproc_per_node("4", 0, 2), 4);
  EXPECT_EQ(resolve_nproc_per_node("auto", 0, 16), 1);
  EXPECT_EQ(resolve_nproc_per_node("auto", 8, 16), 8);
  EXPECT_EQ(resolve_nproc_per_node("gpu", 2, 16), 2);
  EXPECT_EQ(resolve_nproc_per_node("cpu", 0, 16), 16);
  EXPECT_THROW(resolve_nproc_per_node("gpu", 0, 16), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("-1", 0, 16), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("2x", 0, 16), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("", 0, 16), UsageError);
}

TEST(RankList, ParsesCommaSeparatedRanks) {
  EXPECT_EQ(launcher::parse_rank_list("0"), (std::vector<int>{0}));
  EXPECT_EQ(launcher::parse_rank_list("0,3,1"), (std::vector<int>{0, 3, 1}));
  EXPECT_THROW(launcher::parse_rank_list("0,"), UsageError);
  EXPECT_THROW(launcher::parse_rank_list("-1"), UsageError);
}

// Which node options were given decides whether a SLURM step's layout is used
// (launcher/slurm_layout.h): defaults are not "given", even when spelled out.
TEST(ParseLaunchArgs, RecordsWhichNodeOptionsWereGiven) {
  auto o = parse_launch_args({"--nproc-per-node", "2", "--", "true"});
  EXPECT_FALSE(o.nnodes_given || o.node_rank_given || o.master_addr_given);
  o = parse_launch_args({"--nnodes", "1", "--", "true"});
  EXPECT_TRUE(o.nnodes_given);
  o = parse_launch_args({"--master_addr", "h0", "--node_rank", "0", "--", "true"});
  EXPECT_TRUE(o.master_addr_given);
  EXPECT_TRUE(o.node_rank_given);
  EXPECT_FALSE(o.nnodes_given);
}

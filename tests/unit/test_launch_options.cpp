#include <gtest/gtest.h>

#include <cstdlib>

#include "dpinfer/cli/cli.h"
#include "dpinfer/launcher/launch_options.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using dpinfer::cli::parse_launch_args;
using dpinfer::launcher::resolve_nproc_per_node;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
/// The UsageError message of parsing `args`, or "" when it parses.
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_launch_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

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

// Issue 11, item 18: torchrun's -t/--tee and -r/--redirects take a stream selector
// (torch/distributed/elastic/multiprocessing/api.py, Std.from_str); a bare --tee is 3.
TEST(LaunchOptions, TorchrunsTeeAndRedirectsValuesAreTaken) {
  auto o = parse_launch_args({"--log-dir", "d", "--redirects", "3", "--tee", "1", "--", "true"});
  EXPECT_TRUE(o.output.redirects.given);
  EXPECT_EQ(o.output.redirects.streams(0), 3);
  EXPECT_EQ(o.output.tee.streams(5), 1);
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"--", "true"}));
  o = parse_launch_args({"--log-dir", "d", "-r", "0:3,1:2", "-t", "0:1", "prompts.txt"});
  EXPECT_EQ(o.output.redirects.streams(0), 3);
  EXPECT_EQ(o.output.redirects.streams(1), 2);
  EXPECT_EQ(o.output.redirects.streams(2), 0) << "a local rank the mapping leaves out gets 0";
  EXPECT_EQ(o.output.tee.streams(0), 1);
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"prompts.txt"}));
  o = parse_launch_args({"--tee=2", "--log-dir", "d", "--", "true"});
  EXPECT_EQ(o.output.tee.streams(0), 2);
  // A bare --tee (dpinfer's old flag) is --tee 3, and a prompts file after it is still one.
  o = parse_launch_args({"--log-dir", "d", "--tee", "prompts.txt"});
  EXPECT_EQ(o.output.tee.streams(0), 3);
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"prompts.txt"}));
  EXPECT_EQ(parse_launch_args({"--tee", "--log-dir", "d", "3"}).worker_args, (std::vector<std::string>{"3"}));
  // Bad values and missing --log-dir.
  EXPECT_NE(usage_error({"--log-dir", "d", "--redirects", "4", "--", "true"}).find("--redirects '4': expected 0"),
            std::string::npos);
  EXPECT_NE(usage_error({"--log-dir", "d", "--tee=0:7", "--", "true"}).find("--tee '0:7'"), std::string::npos);
  EXPECT_NE(usage_error({"--redirects", "3", "--", "true"}).find("give --log-dir DIR too"), std::string::npos);
  EXPECT_NE(usage_error({"--tee", "3", "--", "true"}).find("give --log-dir DIR too"), std::string::npos);
}

// Issue 11, item 16: torchrun's -m and --no-python.
TEST(LaunchOptions, NoPythonAndModuleNameTheProgramAsTorchrunDoes) {
  EXPECT_EQ(parse_launch_args({"--no-python", "./train", "--lr", "1"}).worker_args,
            (std::vector<std::string>{"--", "./train", "--lr", "1"}));
  EXPECT_EQ(parse_launch_args({"--no_python", "--", "./train"}).worker_args,
            (std::vector<std::string>{"--", "./train"}));
  ::unsetenv("PYTHON_EXEC");
  EXPECT_EQ(parse_launch_args({"--nproc-per-node", "2", "-m", "pkg.train", "--epochs", "3"}).worker_args,
            (std::vector<std::string>{"--", "python3", "-u", "-m", "pkg.train", "--epochs", "3"}));
  ::setenv("PYTHON_EXEC", "/opt/py/bin/python", 1);
  EXPECT_EQ(parse_launch_args({"--module", "pkg.train"}).worker_args,
            (std::vector<std::string>{"--", "/opt/py/bin/python", "-u", "-m", "pkg.train"}));
  ::unsetenv("PYTHON_EXEC");
  EXPECT_NE(usage_error({"-m", "--no-python", "x"}).find("contradict"), std::string::npos);
  EXPECT_NE(usage_error({"-m"}).find("-m: give the module"), std::string::npos);
}

// Issue 11, item 16: --rdzv-* on the static rendezvous.
TEST(LaunchOptions, RendezvousOptionsMapOntoTheStaticRendezvous) {
  auto o = parse_launch_args({"--rdzv-backend", "c10d", "--rdzv-endpoint", "node7:29555", "--rdzv-id", "job9",
                              "--nproc-per-node", "2", "--", "true"});
  EXPECT_EQ(o.master_addr, "node7");
  EXPECT_EQ(*o.master_port, 29555);
  EXPECT_EQ(o.run_id, "job9");
  EXPECT_TRUE(o.master_addr_given) << "an explicit address turns the SLURM step layout off, as --master-addr does";
  o = parse_launch_args({"--rdzv_backend=c10d", "--rdzv_endpoint=[::1]", "--", "true"});
  EXPECT_EQ(o.master_addr, "::1");
  EXPECT_EQ(*o.master_port, 29400) << "torchrun's c10d default port";
  o = parse_launch_args({"--rdzv-backend", "static", "--rdzv-endpoint", "localhost:0", "--", "true"});
  EXPECT_EQ(*o.master_port, 0);
  EXPECT_NE(usage_error({"--rdzv-backend", "static", "--rdzv-endpoint", "h0", "--", "true"}).find("port is missing"),
            std::string::npos);
  std::string etcd = usage_error({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h0:2379", "--", "true"});
  EXPECT_NE(etcd.find("only a static rendezvous"), std::string::npos) << etcd;
  EXPECT_NE(usage_error({"--rdzv-conf", "join_timeout=900", "--", "true"}).find("--rendezvous-timeout"),
            std::string::npos);
  EXPECT_NE(usage_error({"--rdzv-id", "a", "--run-id", "b", "--", "true"}).find("give one"), std::string::npos);
  std::string elastic = usage_error({"--nnodes", "2:4", "--", "true"});
  EXPECT_NE(elastic.find("elastic ranges"), std::string::npos) << elastic;
  EXPECT_NE(elastic.find("--nnodes 4"), std::string::npos) << elastic;
  std::string no_rank = usage_error({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:1", "--", "true"});
  EXPECT_NE(no_rank.find("--node-rank"), std::string::npos) << no_rank;
  EXPECT_EQ(parse_launch_args({"--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                               "h0:1", "--", "true"}).node_rank,
            1);
}

// Issue 11, item 16: torchrun options that change nothing here are accepted, the
// others refused with a hint, never "unknown option".
TEST(LaunchOptions, OtherTorchrunOptionsAreAcceptedOrRefusedWithAHint) {
  EXPECT_EQ(parse_launch_args({"--monitor-interval", "5", "--start-method", "fork", "--local-addr", "10.0.0.2",
                               "--monitor_interval=1", "--", "true"}).worker_args,
            (std::vector<std::string>{"--", "true"}));
  EXPECT_NE(usage_error({"--start-method", "thread", "--", "true"}).find("spawn, fork or forkserver"),
            std::string::npos);
  EXPECT_NE(usage_error({"--monitor-interval", "-1", "--", "true"}).find("--monitor-interval"), std::string::npos);
  for (const char* option : {"--run-path", "--numa-binding=node", "--virtual-local-rank", "--logs_specs"}) {
    std::string e = usage_error({option, "--", "true"});
    EXPECT_NE(e.find("is a torchrun option that dpinfer launch does not have"), std::string::npos) << e;
    EXPECT_EQ(e.find("unknown launch option"), std::string::npos) << e;
  }
}

// Issue 11, item 16: a launch option typed after PROMPTS lands among the generate options.
TEST(LaunchOptions, ALaunchOptionAfterPromptsIsNamedAsSuch) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"prompts.txt", "--nproc-per-node", "2"},
           {"prompts.txt", "--steps", "3", "--max-restarts=2"},
           {"--nproc-per-node", "2", "prompts.txt", "--log-dir", "logs"}}) {
    std::string e = usage_error(args);
    EXPECT_NE(e.find("is a launch option, but it comes after PROMPTS 'prompts.txt'"), std::string::npos) << e;
    EXPECT_NE(e.find("dpinfer launch [OPTIONS] PROMPTS [GENERATE OPTIONS]"), std::string::npos) << e;
  }
  // Names both parsers know are the workers' (-v is generate's --verbose too).
  EXPECT_EQ(parse_launch_args({"prompts.txt", "-v"}).worker_args, (std::vector<std::string>{"prompts.txt", "-v"}));
  // After '--' everything is the program's.
  EXPECT_EQ(parse_launch_args({"--", "train", "--nproc-per-node", "2"}).worker_args.size(), 4u);
}

TEST(LaunchOptions, HelpPointsToGeneratesHelp) {
  std::string help;
  parse_launch_args({"--help"}, &help);
  EXPECT_NE(help.find("dpinfer generate --help"), std::string::npos) << help;
  EXPECT_NE(help.find("-m MODULE"), std::string::npos) << help;
}

TEST(LaunchOptions, LocalRankIsSubstitutedAsTorchrunDoes) {
  using launcher::substitute_local_rank;
  EXPECT_EQ(substitute_local_rank("--local-rank=${local_rank}", 3), "--local-rank=3");
  EXPECT_EQ(substitute_local_rank("$local_rank/${local_rank}", 1), "1/1");
  EXPECT_EQ(substitute_local_rank("$local_ranks $local_rank_x ${LOCAL_RANK} $$", 2),
            "$local_ranks $local_rank_x ${LOCAL_RANK} $$");
}

TEST(LaunchOptions, RendezvousEndpointsSplitAsTorchrunSplitsThem) {
  using launcher::parse_rdzv_endpoint;
  EXPECT_EQ(parse_rdzv_endpoint("h:1", -1), (std::pair<std::string, int>{"h", 1}));
  EXPECT_EQ(parse_rdzv_endpoint("h", 29400), (std::pair<std::string, int>{"h", 29400}));
  EXPECT_EQ(parse_rdzv_endpoint("[fe80::1]:5", -1), (std::pair<std::string, int>{"fe80::1", 5}));
  EXPECT_THROW(parse_rdzv_endpoint("h:99999", -1), UsageError);
  EXPECT_THROW(parse_rdzv_endpoint(":5", -1), UsageError);
  EXPECT_THROW(parse_rdzv_endpoint("[::1", -1), UsageError);
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

}  // namespace DPINFER_UNITY_ID
}  // namespace

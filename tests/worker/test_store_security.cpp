// The rendezvous store lets in only the run's own ranks (issue 33), attacked with real
// processes and real sockets on the loopback: where a run's store listens, a foreign
// c10d client without the run's token, garbage and half-open connections, and a rank
// of another token.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "support/png_reader.h"
#include "support/run_outputs.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kWorker = DPINFER_TEST_WORKER;

std::map<std::string, std::string> rank_env(int rank, int world, int local_world, const std::string& addr, int port) {
  return {{"RANK", std::to_string(rank)},        {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", "0"},                    {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
          {"MASTER_ADDR", addr},                  {"MASTER_PORT", std::to_string(port)},
          {"CUDA_VISIBLE_DEVICES", ""}};
}

/// The local addresses of the sockets listening on TCP `port`, from /proc/net/tcp and
/// tcp6, as the kernel writes them ("0100007F" is 127.0.0.1, "00000000" every interface).
std::vector<std::string> listeners_on(int port) {
  std::vector<std::string> out;
  char port_hex[8];
  std::snprintf(port_hex, sizeof port_hex, "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos && local.substr(colon + 1) == port_hex)
        out.push_back(local.substr(0, colon));
    }
  }
  return out;
}

/// A non-loopback IPv4 address of this host, if it has one.
std::optional<std::string> own_ipv4_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

/// /proc/net/tcp's spelling of an IPv4 address: the 32 bits in host byte order, in hex.
std::string proc_net_spelling(const std::string& ipv4) {
  in_addr a{};
  ::inet_pton(AF_INET, ipv4.c_str(), &a);
  char out[9];
  std::snprintf(out, sizeof out, "%08X", a.s_addr);
  return out;
}


// `dpinfer launch` on one node: the store on 127.0.0.1 only, never on every interface,
// and the run's token in the workers' environment (no token file left in --out).
TEST(StoreSecurity, ASingleNodeRunsStoreListensOnTheLoopbackOnly) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(30));
  const int port = free_port();
  Child launcher(two_rank_launch(kWorker, port, {dir.file("p.txt"), "--out", dir.file("out")}),
                 {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "100"}});
  std::vector<std::string> seen;
  ASSERT_TRUE(wait_until([&] { return !(seen = listeners_on(port)).empty(); }, 60s)) << launcher.err_so_far();
  RunResult r = launcher.wait(120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& address : seen)
    EXPECT_TRUE(address == "0100007F" || address == "00000000000000000000000001000000")
        << "the store listens on " << address << ", not the loopback only";
  EXPECT_FALSE(fs::exists(dir.file("out/.dpinfer-run-token"))) << "the launcher gave the token in the environment";
}

// Ranks started without a launcher (srun, several nodes' launchers) share the token
// through --out: one file, mode 0600, made once, which a rerun (a requeue) reads again.
TEST(StoreSecurity, RanksWithoutALauncherShareATokenFileOnlyTheirUserCanRead) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(6));
  const int port = free_port();
  const std::vector<std::string> argv = {kWorker, "generate", dir.file("p.txt"), "--out", dir.file("out")};
  Child rank0(argv, rank_env(0, 2, 2, "127.0.0.1", port));
  RunResult r1 = run(argv, rank_env(1, 2, 2, "127.0.0.1", port), 60s);
  RunResult r0 = rank0.wait(60s);
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("out/.dpinfer-run-token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  const std::string token = read_file(dir.file("out/.dpinfer-run-token"));
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}\n"))) << token;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.file("out")))
    if (e.path().filename().string().rfind(".dpinfer-run-token.", 0) == 0) left.push_back(e.path().string());
  EXPECT_TRUE(left.empty()) << "a rank's own token file is left: " << left.front();

  // A rerun of the same ranks (a SLURM requeue) agrees on the same token again.
  Child again0(argv, rank_env(0, 2, 2, "127.0.0.1", port));
  RunResult again1 = run(argv, rank_env(1, 2, 2, "127.0.0.1", port), 60s);
  EXPECT_EQ(again0.wait(60s).exit_code, 0);
  EXPECT_EQ(again1.exit_code, 0) << again1.err;
  EXPECT_EQ(read_file(dir.file("out/.dpinfer-run-token")), token);
}

// A rank that spans nodes listens where MASTER_ADDR is, on this host's own address,
// not on every interface; the loopback, which the other nodes cannot reach, is not kept.
TEST(StoreSecurity, AMultiNodeRunsStoreListensOnMasterAddrsInterface) {
  const std::optional<std::string> own = own_ipv4_address();
  if (!own) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  const std::vector<std::string> argv = {kWorker, "generate", dir.file("p.txt"), "--out", dir.file("out"),
                                         "--rendezvous-timeout", "30"};
  {
    // World 2 with one rank per node: rank 1 would be on another node.
    const int port = free_port();
    Child rank0(argv, rank_env(0, 2, 1, *own, port));
    std::vector<std::string> seen;
    EXPECT_TRUE(wait_until([&] { return !(seen = listeners_on(port)).empty(); }, 60s)) << rank0.err_so_far();
    rank0.signal(SIGTERM);
    rank0.wait(30s);
    EXPECT_EQ(seen, std::vector<std::string>{proc_net_spelling(*own)}) << "MASTER_ADDR " << *own;
  }
  {
    // MASTER_ADDR on the loopback with ranks on other nodes (Debian's 127.0.1.1 for the
    // host's own name): every interface, with a warning that says why.
    const int port = free_port();
    Child rank0(argv, rank_env(0, 2, 1, "127.0.0.1", port));
    std::vector<std::string> seen;
    EXPECT_TRUE(wait_until([&] { return !(seen = listeners_on(port)).empty(); }, 60s)) << rank0.err_so_far();
    rank0.signal(SIGTERM);
    RunResult r0 = rank0.wait(30s);
    EXPECT_EQ(seen, std::vector<std::string>{"00000000"});
    EXPECT_TRUE(r0.err.find("the store listens on every interface (0.0.0.0:" + std::to_string(port) +
                            "): MASTER_ADDR '127.0.0.1' resolves to the loopback address 127.0.0.1 on rank 0's host, "
                            "which the other nodes cannot reach") != std::string::npos)
        << r0.err;
  }
}

// A foreign client with LibTorch's own TCPStore client and the store's documented key
// names, but without the token, sets the abort flag, claims dynamic chunks and passes
// the barriers during a run: the run makes every item once, as without it.
TEST(StoreSecurity, AForeignClientWithoutTheTokenChangesNothing) {
  TempDir dir;
  write_file(dir.file("p.txt"), numbered_prompts(40));
  const std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", ""}, {"DPINFER_FAKE_DELAY_MS", "50"}};
  const std::vector<std::string> dynamic = {"--shard-mode", "dynamic", "--batch-size", "2"};
  auto args = [&](const std::string& out) {
    std::vector<std::string> a = {dir.file("p.txt"), "--out", out};
    a.insert(a.end(), dynamic.begin(), dynamic.end());
    return a;
  };
  RunResult reference = run(two_rank_launch(kWorker, free_port(), args(dir.file("reference"))), env, 120s);
  ASSERT_EQ(reference.exit_code, 0) << reference.err;

  const int port = free_port();
  Child launcher(two_rank_launch(kWorker, port, args(dir.file("attacked"))), env);
  // The intruder's client waits for the store to come up, then writes until the run ends.
  RunResult intruder = run({DPINFER_STORE_INTRUDER, "127.0.0.1", std::to_string(port), "60"}, {}, 90s);
  RunResult attacked = launcher.wait(120s);
  ASSERT_EQ(attacked.exit_code, 0) << attacked.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(intruder.out, m, std::regex("intruder: ([0-9]+) rounds of writes"))) << intruder.out
                                                                                                    << intruder.err;
  EXPECT_GT(std::stol(m[1]), 10) << "the intruder wrote during the run: " << intruder.out;
  EXPECT_EQ(attacked.err.find("intruder"), std::string::npos) << attacked.err;

  const std::map<int, int> counts = ok_counts(dir.file("attacked"));
  ASSERT_EQ(counts.size(), 40u) << attacked.err;
  for (const auto& [index, n] : counts) EXPECT_EQ(n, 1) << "item " << index;
  EXPECT_EQ(png_pixels(dir.file("attacked")), png_pixels(dir.file("reference")));
}

// A rank of another token (another run on the same port, or a mistyped
// DPINFER_RUN_TOKEN) is refused in one line within a second, not at the timeout.
TEST(StoreSecurity, ARankWithAnotherTokenIsRefusedWithinASecond) {
  TempDir dir;
  write_file(dir.file("p.txt"), "x\n");
  const int port = free_port();
  auto env_with = [&](int rank, const std::string& token) {
    auto env = rank_env(rank, 2, 2, "127.0.0.1", port);
    env["DPINFER_RUN_TOKEN"] = token;
    return env;
  };
  const std::vector<std::string> argv = {kWorker, "generate", dir.file("p.txt"), "--out", dir.file("out"),
                                         "--rendezvous-timeout", "60"};
  Child rank0(argv, env_with(0, "0123456789abcdef0123456789abcdef"));
  ASSERT_TRUE(wait_until([&] { return !listeners_on(port).empty(); }, 60s)) << rank0.err_so_far();
  // The same process, stopped by bad input before it joins: its start-up time.
  std::vector<std::string> no_prompts = argv;
  no_prompts[2] = dir.file("missing.txt");
  RunResult startup = run(no_prompts, env_with(1, "fedcba9876543210fedcba9876543210"), 60s);
  EXPECT_EQ(startup.exit_code, 2) << startup.err;
  RunResult r1 = run(argv, env_with(1, "FEDCBA9876543210FEDCBA9876543210"), 60s);
  rank0.signal(SIGTERM);
  rank0.wait(30s);
  EXPECT_EQ(r1.exit_code, 2) << r1.err;
  EXPECT_TRUE(std::regex_search(r1.err, std::regex("rank 1 is refused by the store at 127\\.0\\.0\\.1:" +
                                                   std::to_string(port) +
                                                   ": it hosts a run of another token \\(fingerprint [0-9a-f]{8}; "
                                                   "this rank's is [0-9a-f]{8}, from DPINFER_RUN_TOKEN\\)")))
      << r1.err;
  EXPECT_EQ(std::count(r1.err.begin(), r1.err.end(), '\n'), 1) << "one line: " << r1.err;
  EXPECT_LT(r1.seconds - startup.seconds, 1.0) << "refused after " << r1.seconds << " s; start-up alone took "
                                               << startup.seconds << " s";
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// `dpinfer launch` end to end: the real binary, real worker processes (sh), real
// signals. Each test says which promise of the README it checks.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "dpinfer/plan/generate_options.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::vector<std::string> launch(std::vector<std::string> args) {
  args.insert(args.begin(), {dpinfer_binary(), "launch"});
  return args;
}

/// Runs `dpinfer launch ARGS... -- sh -c SCRIPT` with CUDA hidden, so that
/// results do not depend on the machine.
RunResult launch_sh(std::vector<std::string> args, const std::string& script,
                    std::chrono::duration<double> timeout = 60s, std::map<std::string, std::string> env = {}) {
  args.insert(args.end(), {"--", "sh", "-c", script});
  env.emplace("CUDA_VISIBLE_DEVICES", "");
  return run(launch(args), env, timeout);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

int count_files(const TempDir& dir, const std::string& prefix, int n) {
  int found = 0;
  for (int i = 0; i < n; ++i) found += ::access(dir.file(prefix + std::to_string(i)).c_str(), F_OK) == 0;
  return found;
}

pid_t read_pid(const std::string& path) { return static_cast<pid_t>(std::atoi(read_file(path).c_str())); }

/// Starts a launcher in the background whose workers each touch DIR/ready.RANK when
/// set up; returns once all are ready.
std::unique_ptr<Child> start_ready_group(const TempDir& dir, int n, const std::vector<std::string>& opts,
                                         const std::string& worker_setup) {
  std::vector<std::string> args = {"--nproc-per-node", std::to_string(n)};
  args.insert(args.end(), opts.begin(), opts.end());
  std::string script = worker_setup + "; touch " + dir.path() + "/ready.$RANK; while :; do sleep 0.05; done";
  args.insert(args.end(), {"--", "sh", "-c", script});
  auto child = std::make_unique<Child>(launch(args), std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_TRUE(wait_until([&] { return count_files(dir, "ready.", n) == n; }, 20s)) << child->err_so_far();
  return child;
}


// Done-when of the foundation issue: each rank's line arrives.
TEST(LaunchProcess, EachRankPrintsItsLine) {
  RunResult r = launch_sh({"--nproc-per-node", "3"}, "echo $RANK/$WORLD_SIZE");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(contains(r.out, "[rank " + std::to_string(i) + "] " + std::to_string(i) + "/3\n")) << r.out;
}

TEST(LaunchProcess, WorkersGetTheTorchrunEnvironment) {
  RunResult r = launch_sh({"--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "1", "--master-addr", "10.9.8.7",
                           "--master-port", "29999", "--max-restarts", "0", "--run-id", "myrun"},
                          "echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
                          "GW=$GROUP_WORLD_SIZE RN=$ROLE_NAME RR=$ROLE_RANK RW=$ROLE_WORLD_SIZE "
                          "MA=$MASTER_ADDR MP=$MASTER_PORT RC=$TORCHELASTIC_RESTART_COUNT "
                          "MR=$TORCHELASTIC_MAX_RESTARTS ID=$TORCHELASTIC_RUN_ID OMP=$OMP_NUM_THREADS "
                          "NCCL=$TORCH_NCCL_ASYNC_ERROR_HANDLING KEEP=$DPINFER_TEST_INHERITED",
                          60s, {{"DPINFER_TEST_INHERITED", "yes"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 2] R=2 L=0 W=6 LW=2 G=1 GW=3 RN=default RR=2 RW=6 MA=10.9.8.7 MP=29999 RC=0 "
                              "MR=0 ID=myrun OMP=1 NCCL=1 KEEP=yes"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 3] R=3 L=1 W=6")) << r.out;
  EXPECT_TRUE(contains(r.err, "OMP_NUM_THREADS=1")) << "the OMP default is announced once: " << r.err;
}

// The store's secret (plan/run_token.h): on one node a fresh one per run, the same for
// every worker of it; the user's own kept; none from a launcher of several nodes, whose
// workers then share the token file in --out.
TEST(LaunchProcess, WorkersOfOneNodeShareAFreshRunToken) {
  auto tokens = [](const std::vector<std::string>& opts, const std::map<std::string, std::string>& env) {
    std::vector<std::string> args = {"--nproc-per-node", "2"};
    args.insert(args.end(), opts.begin(), opts.end());
    RunResult r = launch_sh(args, "echo T=${DPINFER_RUN_TOKEN:-none}", 60s, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> seen;
    std::smatch m;
    for (auto it = r.out.cbegin(); std::regex_search(it, r.out.cend(), m, std::regex("T=([0-9a-z]+)")); it = m[0].second)
      seen.insert(m[1]);
    return seen;
  };
  const std::set<std::string> first = tokens({}, {}), second = tokens({}, {});
  ASSERT_EQ(first.size(), 1u) << "both workers of a run get the same token";
  EXPECT_TRUE(std::regex_match(*first.begin(), std::regex("[0-9a-f]{32}"))) << *first.begin();
  EXPECT_NE(first, second) << "each run gets its own";
  const std::string mine = "00112233445566778899aabbccddeeff";
  EXPECT_EQ(tokens({}, {{"DPINFER_RUN_TOKEN", mine}}), std::set<std::string>{mine});
  EXPECT_EQ(tokens({"--nnodes", "2", "--node-rank", "1", "--master-port", "29999"}, {}), std::set<std::string>{"none"});
}

TEST(LaunchProcess, UserSetOmpAndNcclVariablesAreKept) {
  RunResult r = launch_sh({"--nproc-per-node", "2"}, "echo OMP=$OMP_NUM_THREADS NCCL=$TORCH_NCCL_ASYNC_ERROR_HANDLING",
                          60s, {{"OMP_NUM_THREADS", "4"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "[rank 0] OMP=4 NCCL=3")) << r.out;
  EXPECT_FALSE(contains(r.err, "OMP_NUM_THREADS=1"));
}

TEST(LaunchProcess, DefaultPortIsAFreePortOnASingleNode) {
  RunResult r = launch_sh({"--nproc-per-node", "2"}, "echo port=$MASTER_PORT");
  std::smatch m;
  std::regex re(R"(\[rank 0\] port=(\d+))");
  ASSERT_TRUE(std::regex_search(r.out, m, re)) << r.out;
  int port = std::stoi(m[1]);
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  EXPECT_TRUE(contains(r.out, "[rank 1] port=" + m[1].str())) << "both ranks share one port";
}

TEST(LaunchProcess, FirstFailureStopsTheOthersAndNamesTheRootCause) {
  RunResult r = launch_sh({"--nproc-per-node", "3"},
                          "if [ $RANK = 1 ]; then sleep 0.3; echo 'CUDA out of memory on rank 1' >&2; exit 3; fi; "
                          "exec sleep 60",
                          30s);
  EXPECT_EQ(r.exit_code, 3) << "the root cause's own status: " << r.err;
  EXPECT_LT(r.seconds, 10) << "sleeping peers were stopped, not waited for";
  EXPECT_TRUE(contains(r.err, "root cause: rank 1 (local rank 1, pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with exit code 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "| CUDA out of memory on rank 1")) << "its stderr tail is quoted: " << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by signal 15 (SIGTERM) after dpinfer stopped it")) << r.err;
}

TEST(LaunchProcess, GracePeriodEndsInSigkillForWorkersIgnoringSigterm) {
  RunResult r = launch_sh({"--nproc-per-node", "2", "--grace-period", "1"},
                          "if [ $RANK = 0 ]; then sleep 0.3; exit 5; fi; trap '' TERM; while :; do sleep 0.05; done",
                          30s);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_GE(r.seconds, 1.0) << "the grace period was honoured";
  EXPECT_LT(r.seconds, 8.0) << "then SIGKILL came";
  EXPECT_TRUE(contains(r.err, "killed by signal 9 (SIGKILL)")) << r.err;
}

TEST(LaunchProcess, AWorkerKilledBySignalGives128PlusN) {
  RunResult r = launch_sh({}, "kill -SEGV $$");
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by signal 11 (SIGSEGV)")) << r.err;
}

TEST(LaunchProcess, EarliestDeathIsTheRootCause) {
  RunResult r = launch_sh({"--nproc-per-node", "3"},
                          "case $RANK in 2) exit 4;; 0) sleep 0.5; exit 6;; *) exec sleep 60;; esac", 30s);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: rank 2")) << r.err;
}

TEST(LaunchProcess, SigintIsForwardedToEveryWorkerAndExits130) {
  TempDir dir;
  auto launcher = start_ready_group(dir, 3, {}, "trap 'echo INT > " + dir.path() + "/got.$RANK; exit 0' INT");
  launcher->signal(SIGINT);
  RunResult r = launcher->wait(20s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_EQ(count_files(dir, "got.", 3), 3) << "every worker saw SIGINT: " << r.err;
}

TEST(LaunchProcess, SigtermIsForwardedAndExits143) {
  TempDir dir;
  auto launcher = start_ready_group(dir, 2, {}, "trap 'echo TERM > " + dir.path() + "/got.$RANK; exit 0' TERM");
  launcher->signal(SIGTERM);
  RunResult r = launcher->wait(20s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_EQ(count_files(dir, "got.", 2), 2) << r.err;
}

TEST(LaunchProcess, SighupIsForwardedAndExits129) {
  TempDir dir;
  auto launcher = start_ready_group(dir, 2, {}, "trap 'echo HUP > " + dir.path() + "/got.$RANK; exit 0' HUP");
  launcher->signal(SIGHUP);
  RunResult r = launcher->wait(20s);
  EXPECT_EQ(r.exit_code, 129) << r.err;
  EXPECT_EQ(count_files(dir, "got.", 2), 2) << r.err;
}

TEST(LaunchProcess, SecondSigintKillsAtOnce) {
  TempDir dir;
  auto launcher = start_ready_group(dir, 2, {"--grace-period", "60"}, "trap '' INT");
  launcher->signal(SIGINT);
  std::this_thread::sleep_for(300ms);
  auto t0 = std::chrono::steady_clock::now();
  launcher->signal(SIGINT);
  RunResult r = launcher->wait(30s);
  double after_second = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(after_second, 5.0) << "not the 60 s grace period";
  EXPECT_TRUE(contains(r.err, "second SIGINT")) << r.err;
}

TEST(LaunchProcess, Sigusr1IsForwardedAndExits138) {
  // SLURM's --signal=B:USR1@N reaches a launcher that is the batch script itself.
  TempDir dir;
  auto launcher = start_ready_group(dir, 2, {}, "trap 'echo USR1 > " + dir.path() + "/got.$RANK; exit 0' USR1");
  launcher->signal(SIGUSR1);
  RunResult r = launcher->wait(20s);
  EXPECT_EQ(r.exit_code, 128 + SIGUSR1) << r.err;
  EXPECT_EQ(count_files(dir, "got.", 2), 2) << r.err;
}

TEST(LaunchProcess, ASignalDuringAFailuresTeardownKeepsItsRootCause) {
  TempDir dir;
  Child launcher(launch({"--nproc-per-node", "2", "--grace-period", "60", "--max-restarts", "2", "--", "sh", "-c",
                         "if [ $RANK = 1 ]; then sleep 0.3; echo 'rank 1 broke' >&2; exit 3; fi; "
                         "trap '' TERM INT; while :; do sleep 0.05; done"}),
                 {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return contains(launcher.err_so_far(), "rank 1 failed"); }, 20s))
      << launcher.err_so_far();
  launcher.signal(SIGINT);  // the user loses patience with the 60 s grace period
  std::this_thread::sleep_for(200ms);
  launcher.signal(SIGINT);  // and kills at once
  RunResult r = launcher.wait(20s);
  EXPECT_EQ(r.exit_code, 3) << "the root cause's status, not 130: " << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: rank 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "| rank 1 broke")) << r.err;
  EXPECT_FALSE(contains(r.err, "restarting the worker group")) << "the user asked to stop: " << r.err;
}

TEST(LaunchProcess, AnUnexecutableWorkerIsNotRestarted) {
  TempDir dir;
  write_file(dir.file("script"), "#!/no/such/interpreter\necho hi\n");
  ::chmod(dir.file("script").c_str(), 0755);
  RunResult r = run(launch({"--max-restarts", "3", "--", dir.file("script")}), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "its interpreter (the #! line) was not found")) << r.err;
  EXPECT_TRUE(contains(r.err, "not restarting: the worker command cannot be executed")) << r.err;
  EXPECT_FALSE(contains(r.err, "restarting the worker group")) << r.err;
  EXPECT_FALSE(contains(r.err, "pid 0")) << r.err;
}

// A console whose reader stalls (a `| less` that is not scrolling) must not freeze the
// supervision: the signal is still forwarded and the grace period still ends in SIGKILL.
TEST(LaunchProcess, AStalledStdoutReaderDoesNotStopTheTeardown) {
  TempDir dir;
  std::string fifo = dir.file("stdout.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // keeps the pipe open, reads nothing yet
  ASSERT_GE(reader, 0);
  std::string worker = "echo $$ > " + dir.path() + "/pid.$RANK; trap '' TERM; while :; do echo noise noise noise; done";
  Child launcher({"sh", "-c", "exec \"$0\" launch --nproc-per-node 2 --grace-period 1 -- sh -c \"$1\" > \"$2\"",
                  dpinfer_binary(), worker, fifo},
                 {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return count_files(dir, "pid.", 2) == 2; }, 20s)) << launcher.err_so_far();
  std::this_thread::sleep_for(500ms);  // long enough to fill the pipe
  pid_t w0 = read_pid(dir.file("pid.0")), w1 = read_pid(dir.file("pid.1"));
  launcher.signal(SIGTERM);
  EXPECT_TRUE(wait_until([&] { return !process_alive(w0) && !process_alive(w1); }, 10s))
      << "the workers ignore SIGTERM; SIGKILL must come 1 s later: " << launcher.err_so_far();
  EXPECT_TRUE(contains(launcher.err_so_far(), "grace period over; sent SIGKILL")) << launcher.err_so_far();
  // Now read: the launcher writes what it queued and exits.
  std::thread drain([reader] {
    char buf[65536];
    for (int idle = 0; idle < 200;) {
      pollfd p{reader, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        ++idle;
        continue;
      }
      ssize_t n = ::read(reader, buf, sizeof buf);
      if (n == 0) return;  // EOF: the launcher is gone
      if (n < 0 && errno != EAGAIN && errno != EINTR) return;
    }
  });
  RunResult r = launcher.wait(30s);
  drain.join();
  ::close(reader);
  EXPECT_EQ(r.exit_code, 143) << r.err;
}

TEST(LaunchProcess, Kill9OfTheLauncherLeavesNoWorkerOrGrandchildRunning) {
  TempDir dir;
  auto launcher = start_ready_group(
      dir, 3, {}, "sleep 300 & echo $! > " + dir.path() + "/bg.$RANK; echo $$ > " + dir.path() + "/pid.$RANK");
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    pids.push_back(read_pid(dir.file("pid." + std::to_string(i))));
    pids.push_back(read_pid(dir.file("bg." + std::to_string(i))));
  }
  for (pid_t p : pids) ASSERT_TRUE(process_alive(p)) << p;
  launcher->signal(SIGKILL);
  launcher->wait(10s);
  bool all_gone = wait_until(
      [&] {
        for (pid_t p : pids)
          if (process_alive(p)) return false;
        return true;
      },
      10s);
  EXPECT_TRUE(all_gone) << "workers and their children died with the launcher";
  for (pid_t p : pids)
    if (process_alive(p)) ::kill(p, SIGKILL);  // don't leak into other tests
}

TEST(LaunchProcess, LeftoverChildrenOfAFinishedWorkerAreKilled) {
  TempDir dir;
  RunResult r = launch_sh({}, "sleep 300 & echo $! > " + dir.path() + "/bg; exit 0", 30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  pid_t bg = read_pid(dir.file("bg"));
  ASSERT_GT(bg, 0);
  EXPECT_TRUE(wait_until([&] { return !process_alive(bg); }, 5s));
}

TEST(LaunchProcess, OrphanedDescendantsAreReapedNotLeftAsZombies) {
  TempDir dir;
  // The subshell exits at once; its `sleep 0.2` is orphaned, reparented to the
  // launcher (a child subreaper) and must be reaped when it exits.
  Child launcher(launch({"--", "sh", "-c", "( sleep 0.2 & ); touch " + dir.path() + "/ready; sleep 1.5"}),
                 {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return ::access(dir.file("ready").c_str(), F_OK) == 0; }, 10s));
  std::this_thread::sleep_for(700ms);
  EXPECT_TRUE(zombie_children(launcher.pid()).empty());
  EXPECT_EQ(launcher.wait(20s).exit_code, 0);
}

TEST(LaunchProcess, RestartsTheGroupWithTheRestartCountIncremented) {
  TempDir dir;
  RunResult r = launch_sh({"--nproc-per-node", "2", "--max-restarts", "3"},
                          // Each rank records the attempt, waits for its peer to have done the same
                          // (a failure stops peers at once), then fails until the third attempt.
                          "cd " + dir.path() + "; echo $TORCHELASTIC_RESTART_COUNT >> count.$RANK; "
                          "while [ $(cat count.* | wc -l) -lt $(( (TORCHELASTIC_RESTART_COUNT + 1) * 2 )) ]; "
                          "do sleep 0.01; done; [ $TORCHELASTIC_RESTART_COUNT -ge 2 ]",
                          30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(dir.file("count.0")), "0\n1\n2\n");
  EXPECT_EQ(read_file(dir.file("count.1")), "0\n1\n2\n");
  EXPECT_TRUE(contains(r.err, "restart 1 of 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "restart 2 of 3")) << r.err;
}

TEST(LaunchProcess, GivesUpAfterMaxRestarts) {
  TempDir dir;
  RunResult r = launch_sh({"--max-restarts", "1"}, "echo x >> " + dir.path() + "/runs; exit 7", 30s);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(read_file(dir.file("runs")), "x\nx\n");
  EXPECT_TRUE(contains(r.err, "attempt 2 of 2")) << r.err;
}

TEST(LaunchProcess, NoisyWorkersProduceWholePrefixedLines) {
  // Each line is written in two pieces, so a launcher that forwarded raw chunks
  // would interleave ranks mid-line.
  const int kLines = 1500;
  std::string script = "i=0; while [ $i -lt " + std::to_string(kLines) +
                       " ]; do printf 'r%s-%05d-' $RANK $i; printf '%s\\n' "
                       "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done";
  RunResult r = launch_sh({"--nproc-per-node", "4"}, script, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex re(R"(^\[rank (\d)\] r(\d)-(\d{5})-x{60}$)");
  std::map<int, int> next;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << "garbled line: '" << line << "'";
    int rank = std::stoi(m[1]);
    ASSERT_EQ(rank, std::stoi(m[2])) << line;
    ASSERT_EQ(std::stoi(m[3]), next[rank]) << "lines of one rank stay in order";
    ++next[rank];
  }
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(next[rank], kLines) << "rank " << rank;
}

TEST(LaunchProcess, PartialLastLineIsFlushed) {
  RunResult r = launch_sh({}, "printf 'no newline'");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "[rank 0] no newline\n");
}

namespace {

/// The attempt directories named by the launcher's "worker logs: PATH" lines, in order.
std::vector<std::string> worker_log_dirs(const std::string& err) {
  std::vector<std::string> out;
  std::regex re(R"(^\[dpinfer\] worker logs: (.+)$)");
  for (const auto& line : lines_of(err)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out.push_back(m[1]);
  }
  return out;
}

}  // namespace

// Issue 11, item 18: torchrun's layout, attempt_N/LOCAL_RANK/{stdout,stderr}.log, and
// torchrun's console: --log-dir alone keeps it (this test once asserted a silent one).
TEST(LaunchProcess, LogDirGetsTorchrunsLayoutAndTheConsoleStays) {
  TempDir dir;
  RunResult r = launch_sh({"--nproc-per-node", "2", "--log-dir", dir.path(), "--run-id", "job"},
                          "echo out$RANK; echo err$RANK >&2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] out0\n")) << r.out;
  EXPECT_TRUE(contains(r.err, "[rank 1] err1\n")) << r.err;
  const auto logs = worker_log_dirs(r.err);
  ASSERT_EQ(logs.size(), 1u) << "the console says once where the files are: " << r.err;
  const std::string run_dir = dir.path() + "/job_";  // then mkdtemp's 6 characters
  EXPECT_EQ(logs[0].substr(0, run_dir.size()), run_dir) << logs[0];
  EXPECT_EQ(logs[0].substr(run_dir.size() + 6), "/attempt_0") << logs[0];
  EXPECT_EQ(read_file(logs[0] + "/0/stdout.log"), "out0\n");
  EXPECT_EQ(read_file(logs[0] + "/1/stderr.log"), "err1\n");
}

// torchrun's -r/--redirects sends streams to the files only; -t/--tee keeps a console copy.
TEST(LaunchProcess, RedirectsAndTeeSelectStreamsPerLocalRank) {
  TempDir dir;
  RunResult all = launch_sh({"--nproc-per-node", "2", "--log-dir", dir.file("a"), "--redirects", "3"},
                            "echo out$RANK; echo err$RANK >&2");
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out, "");
  EXPECT_FALSE(contains(all.err, "[rank ")) << all.err;
  const auto logs = worker_log_dirs(all.err);
  ASSERT_EQ(logs.size(), 1u) << all.err;
  EXPECT_EQ(read_file(logs[0] + "/1/stdout.log"), "out1\n");
  RunResult some = launch_sh({"--nproc-per-node", "2", "--log-dir", dir.file("b"), "-r", "3", "-t", "0:1"},
                             "echo out$RANK; echo err$RANK >&2");
  EXPECT_EQ(some.exit_code, 0) << some.err;
  EXPECT_EQ(some.out, "[rank 0] out0\n") << "only local rank 0's stdout is tee'd";
  EXPECT_FALSE(contains(some.err, "[rank ")) << some.err;
  RunResult per_rank = launch_sh({"--nproc-per-node", "2", "--log-dir", dir.file("c"), "--redirects", "1:3"},
                                 "echo out$RANK");
  EXPECT_EQ(per_rank.out, "[rank 0] out0\n") << "local rank 1 is redirected, 0 is not";
}

// torchrun's behaviour: each launcher run gets a fresh DIR/RUN_ID_XXXXXX, so a second
// run with the same --log-dir and --run-id does not truncate the first one's logs,
// and the restarts of one run share its directory.
TEST(LaunchProcess, EachRunGetsItsOwnLogDirAndKeepsEarlierRuns) {
  TempDir dir;
  RunResult first = launch_sh({"--log-dir", dir.path(), "--run-id", "job"}, "echo first");
  RunResult second = launch_sh({"--log-dir", dir.path(), "--run-id", "job", "--max-restarts", "1"},
                               "echo second$TORCHELASTIC_RESTART_COUNT; [ $TORCHELASTIC_RESTART_COUNT = 1 ]");
  EXPECT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(second.exit_code, 0) << second.err;
  const auto a = worker_log_dirs(first.err), b = worker_log_dirs(second.err);
  ASSERT_EQ(a.size(), 1u) << first.err;
  ASSERT_EQ(b.size(), 2u) << "one line per attempt: " << second.err;
  EXPECT_EQ(read_file(a[0] + "/0/stdout.log"), "first\n");
  EXPECT_EQ(b[0], b[0].substr(0, b[0].size() - 1) + "0");
  EXPECT_EQ(b[1], b[0].substr(0, b[0].size() - 1) + "1") << "restarts share the run's directory";
  EXPECT_EQ(read_file(b[0] + "/0/stdout.log"), "second0\n");
  EXPECT_EQ(read_file(b[1] + "/0/stdout.log"), "second1\n");
  EXPECT_NE(a[0].substr(0, a[0].rfind('/')), b[0].substr(0, b[0].rfind('/')));
}

TEST(LaunchProcess, RunIdThatWouldLeaveTheLogDirIsRefused) {
  TempDir dir;
  for (const char* id : {"../../x", "a/b", ".hidden", ""}) {
    RunResult r = launch_sh({"--log-dir", dir.file("logs"), "--run-id", id}, "echo ran");
    EXPECT_EQ(r.exit_code, 2) << id << ": " << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "--run-id")) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_NE(::access(dir.file("logs").c_str(), F_OK), 0) << "nothing was written";
}

TEST(LaunchProcess, TeeCopiesLogFilesToTheConsole) {
  TempDir dir;
  RunResult r = launch_sh({"--log-dir", dir.path(), "--tee"}, "echo hello");
  EXPECT_EQ(r.out, "[rank 0] hello\n");
  const auto logs = worker_log_dirs(r.err);
  ASSERT_EQ(logs.size(), 1u) << r.err;
  EXPECT_TRUE(contains(logs[0], "/none_")) << logs[0];
  EXPECT_EQ(read_file(logs[0] + "/0/stdout.log"), "hello\n");
}

TEST(LaunchProcess, LocalRanksFilterAndQuiet) {
  RunResult r = launch_sh({"--nproc-per-node", "3", "--local-ranks-filter", "1"}, "echo hi");
  EXPECT_EQ(r.out, "[rank 1] hi\n");
  RunResult q = launch_sh({"--nproc-per-node", "2", "--quiet"}, "echo hi; echo there >&2");
  EXPECT_EQ(q.exit_code, 0);
  EXPECT_EQ(q.out, "");
  EXPECT_FALSE(contains(q.err, "there"));
}

TEST(LaunchProcess, QuietFailureStillQuotesTheRootCausesStderr) {
  RunResult r = launch_sh({"--quiet"}, "echo 'Traceback: boom' >&2; exit 9");
  EXPECT_EQ(r.exit_code, 9);
  EXPECT_TRUE(contains(r.err, "| Traceback: boom")) << r.err;
}

TEST(LaunchProcess, BusyMasterPortFailsAtOnceNamingThePort) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string port = std::to_string(ntohs(addr.sin_port));
  RunResult r = launch_sh({"--master-port", port}, "echo should-not-run");
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--master-port " + port + " is already in use")) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_LT(r.seconds, 5);
}

TEST(LaunchProcess, BadArgumentsExit2WithOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nproc-per-node", "0", "--", "true"},
           {"--master-port", "-5", "--", "true"},
           {"--no-such-option", "--", "true"},
           {"--nproc-per-node", "gpu", "--", "true"},
           {"--nnodes", "x", "--", "true"},
           {"--local-ranks-filter", "5", "--nproc-per-node", "2", "--", "true"},
           {"--grace-period", "inf", "--", "true"},
           {"--grace-period", "1e300", "--", "true"},
           {"--run-id", "../../x", "--", "true"},
           {"--tee", "3", "--", "true"},
           {"--log-dir", "logs", "-t", "7", "prompts.txt"},
           {"--redirects", "3", "--", "true"},
           {"-r", "3", "--", "true"},
           {"--rdzv-backend", "etcd", "--", "true"},
           {"--nnodes", "1:2", "--", "true"},
           {"--numa-binding", "node", "--", "true"},
           {"prompts.txt", "--nproc-per-node", "2"},
           {"--nproc-per-node", "3", "--max-restarts", "2", "prompts.txt", "--bogus"},
           {"--nproc-per-node", "3", "prompts.txt", "--steps", "0"},
       }) {
    RunResult r = run(launch(args), {{"CUDA_VISIBLE_DEVICES", ""}});
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "error: ")) << r.err;
    EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  }
}

// Bad generate options are found once by the launcher, before any worker starts,
// not by every worker on every restart. The prompts file is the workers' to read.
TEST(LaunchProcess, BadGenerateOptionsExit2BeforeAnyWorkerStarts) {
  TempDir dir;
  RunResult r = run(launch({"--nproc-per-node", "3", "--max-restarts", "2", dir.file("p.txt"), "--bogus"}),
                    {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "--bogus")) << r.err;
  EXPECT_TRUE(contains(r.err, "dpinfer generate --help")) << r.err;
  EXPECT_FALSE(contains(r.err + r.out, "[rank")) << r.err;
  RunResult v = run(launch({"--nproc-per-node", "2", dir.file("p.txt"), "--dtype", "fp64"}), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_EQ(lines_of(v.err).size(), 1u) << v.err;
  EXPECT_TRUE(contains(v.err, "--dtype")) << v.err;
}

// Issue 31: --dry-run checks a documented GPU command on any machine. It reads no prompts file and
// no model (neither exists here), counts no device (`gpu` with none visible) and starts no worker;
// it prints the resolved generate options as JSON. A bad option is still one line and exit 2.
TEST(LaunchProcess, DryRunChecksTheCommandLineAndStartsNoWorker) {
  TempDir dir;
  RunResult r = run(launch({"--nproc-per-node", "gpu", dir.file("missing.txt"), "--model", "org/not-in-any-cache",
                            "--steps", "9", "--out", dir.file("out"), "--dry-run"}),
                    {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "\"steps\": 9")) << r.out;
  EXPECT_TRUE(contains(r.err, "dry run")) << r.err;
  EXPECT_FALSE(contains(r.out + r.err, "[rank ")) << "no worker started";
  EXPECT_NE(::access(dir.file("out").c_str(), F_OK), 0) << "nothing written";
  RunResult bad = run(launch({"--nproc-per-node", "gpu", dir.file("missing.txt"), "--steps", "0", "--dry-run"}),
                      {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(lines_of(bad.err).size(), 1u) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--steps")) << bad.err;
  // `dpinfer generate --dry-run` is answered by the launcher binary itself, without LibTorch.
  RunResult g = run({dpinfer_binary(), "generate", dir.file("missing.txt"), "--width", "1024", "--dry-run"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_TRUE(contains(g.out, "\"width\": 1024")) << g.out;
  RunResult gbad = run({dpinfer_binary(), "generate", dir.file("missing.txt"), "--width", "1001", "--dry-run"});
  EXPECT_EQ(gbad.exit_code, 2) << gbad.err;
  EXPECT_TRUE(contains(gbad.err, "--width")) << gbad.err;
}

// Issue 31: the option reference (docs/reference/options.md) is made from the parsers' own
// definitions, so every option either command takes is in it.
TEST(LaunchProcess, OptionReferenceListsEveryLaunchAndGenerateOption) {
  RunResult r = run({dpinfer_binary(), "help", "--markdown"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& name : dpinfer::plan::generate_option_names()) {
    if (name.rfind("--", 0) == 0 && name != "--help") {
      EXPECT_TRUE(contains(r.out, "`" + name + "`")) << name;
    }
  }
  for (const char* name : {"`--nproc-per-node`", "`--max-restarts`", "`--log-dir`", "`--rdzv-backend`", "`-m`"})
    EXPECT_TRUE(contains(r.out, name)) << name;
  EXPECT_FALSE(contains(r.out, "`--help`")) << "--help is CLI11's, not an option of the run";
  // merge and status, from their own parsers.
  const size_t merge = r.out.find("## `dpinfer merge`"), status = r.out.find("## `dpinfer status`");
  ASSERT_NE(merge, std::string::npos) << r.out;
  ASSERT_NE(status, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`--latest-wins`", merge), std::string::npos);
  EXPECT_NE(r.out.find("`--prompts`", status), std::string::npos);
  EXPECT_NE(r.out.find("`--json`", status), std::string::npos);
}

TEST(LaunchProcess, StandaloneIsAcceptedAsTorchrunsSingleNodeDefault) {
  RunResult r = launch_sh({"--standalone", "--nproc-per-node", "2"}, "echo $RANK/$WORLD_SIZE $MASTER_ADDR");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] 1/2 127.0.0.1\n")) << r.out;
  RunResult h = run({dpinfer_binary(), "launch", "--help"});
  EXPECT_TRUE(contains(h.out, "--standalone")) << h.out;
}

// Each worker holds about 8 descriptors in the launcher: past RLIMIT_NOFILE the
// launch would fail midway, so it is refused up front.
TEST(LaunchProcess, NprocBeyondTheOpenFileLimitExits2NamingUlimit) {
  RunResult r = run({"sh", "-c", "ulimit -n 256 && exec \"$0\" launch --nproc-per-node 100 -- echo ran", dpinfer_binary()},
                    {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "open-file limit of 256")) << r.err;
  EXPECT_TRUE(contains(r.err, "ulimit -n")) << r.err;
  EXPECT_EQ(r.out, "");
  RunResult ok = run({"sh", "-c", "ulimit -n 256 && exec \"$0\" launch --nproc-per-node 20 -- true", dpinfer_binary()},
                     {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(LaunchProcess, GenerateHelpInThePromptsFormPrintsOnce) {
  RunResult r = run(launch({"--nproc-per-node", "3", "prompts.txt", "--help"}), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "--stop-timeout")) << "generate's help: " << r.out;
  EXPECT_EQ(r.out.find("--stop-timeout"), r.out.rfind("--stop-timeout")) << "once, not once per rank: " << r.out;
  EXPECT_FALSE(contains(r.out + r.err, "[rank ")) << "no worker started";
}

TEST(LaunchProcess, UnknownWorkerCommandExits127) {
  RunResult r = run(launch({"--nproc-per-node", "2", "--", "dpinfer-no-such-command", "x"}));
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "'dpinfer-no-such-command' not found in PATH")) << r.err;
}

TEST(LaunchProcess, NonExecutableWorkerCommandExits126) {
  TempDir dir;
  write_file(dir.file("script"), "#!/bin/sh\necho hi\n");
  RunResult r = run(launch({"--", dir.file("script")}));
  EXPECT_EQ(r.exit_code, 126) << r.err;
  EXPECT_TRUE(contains(r.err, "not an executable")) << r.err;
}

TEST(LaunchProcess, AutoIsOneProcessWithoutAGpu) {
  RunResult r = launch_sh({"--nproc-per-node", "auto"}, "echo $WORLD_SIZE");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] 1\n");
}

TEST(LaunchProcess, WorkerStdinIsEmpty) {
  RunResult r = launch_sh({}, "cat; echo done");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "[rank 0] done\n");
}

TEST(LaunchProcess, HelpAndVersion) {
  RunResult h = run({dpinfer_binary(), "launch", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_TRUE(contains(h.out, "--nproc-per-node")) << h.out;
  RunResult v = run({dpinfer_binary(), "--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_TRUE(contains(v.out, "dpinfer ")) << v.out;
  RunResult u = run({dpinfer_binary(), "frobnicate"});
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_TRUE(contains(u.err, "unknown command 'frobnicate'")) << u.err;
}

namespace {

/// A worker script that reports its progress on fd 3 as dpinfer's worker does:
/// `items` items, one every `pause` seconds, with a line on stdout and stderr each.
std::string reporting_worker(int world, int items, const std::string& pause) {
  const std::string n = std::to_string(items);
  return "i=0; while [ $i -le " + n + " ]; do "
         "printf '{\"rank\":%s,\"world\":" + std::to_string(world) +
         ",\"done\":%s,\"skipped\":0,\"failed\":0,\"todo\":" + n + ",\"total\":" + std::to_string(world * items) +
         "}\\n' $RANK $i >&3; "
         "echo \"rank $RANK item $i\"; echo \"rank $RANK note $i\" >&2; sleep " + pause + "; i=$((i+1)); done";
}

/// The "[dpinfer] N/TOTAL images ..." lines of `err`, with N.
std::vector<std::pair<int, std::string>> progress_lines(const std::string& err, int total) {
  std::vector<std::pair<int, std::string>> out;
  std::regex re("^\\[dpinfer\\] (\\d+)/" + std::to_string(total) + " images \\(\\d+\\.\\d%\\)(, .*)?$");
  for (const auto& line : lines_of(err)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out.emplace_back(std::stoi(m[1]), line);
  }
  return out;
}

}  // namespace

// Issue 3, "Progress": one aggregated line, periodic plain lines off a terminal.
TEST(LaunchProcess, ProgressReportsOnFd3BecomeOneAggregatedLine) {
  RunResult r = launch_sh({"--nproc-per-node", "2", "--progress-interval", "0.1"},
                          "echo fd=$" "DPINFER_PROGRESS_FD; " + reporting_worker(2, 5, "0.1"), 30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] fd=3\n")) << r.out;
  auto progress = progress_lines(r.err, 10);
  ASSERT_GE(progress.size(), 2u) << "periodic lines, then the final one: " << r.err;
  for (size_t i = 1; i < progress.size(); ++i) EXPECT_LE(progress[i - 1].first, progress[i].first) << r.err;
  EXPECT_EQ(progress.back().first, 10) << r.err;
  EXPECT_TRUE(contains(progress.back().second, "[dpinfer] 10/10 images (100.0%), ")) << progress.back().second;
  EXPECT_TRUE(contains(progress.back().second, " images/s")) << progress.back().second;
  // Worker lines stay whole and apart from the progress lines.
  std::regex out_line(R"(^\[rank ([01])\] (fd=3|rank \1 item \d)$)");
  for (const auto& line : lines_of(r.out)) EXPECT_TRUE(std::regex_match(line, out_line)) << "'" << line << "'";
  std::regex err_line(R"(^(\[rank ([01])\] rank \2 note \d|\[dpinfer\] .*)$)");
  int notes = 0;
  for (const auto& line : lines_of(r.err)) {
    EXPECT_TRUE(std::regex_match(line, err_line)) << "'" << line << "'";
    notes += contains(line, " note ");
  }
  EXPECT_EQ(notes, 12);
}

TEST(LaunchProcess, ProgressIsOffWithIntervalZeroOrQuiet) {
  const std::string script = "echo fd=$" "{DPINFER_PROGRESS_FD:-none}; [ -e /proc/self/fd/3 ] && echo fd3-open; "
                             "true";
  RunResult on = launch_sh({}, script, 30s, {{"DPINFER_PROGRESS_FD", "9"}});
  EXPECT_EQ(on.out, "[rank 0] fd=3\n[rank 0] fd3-open\n") << "the launcher's own pipe replaces an inherited one";
  RunResult off = launch_sh({"--progress-interval", "0"}, script, 30s, {{"DPINFER_PROGRESS_FD", "9"}});
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.out, "[rank 0] fd=none\n") << "no pipe, and no stale variable pointing elsewhere";

  TempDir dir;
  RunResult quiet = launch_sh({"--quiet"}, "echo ${DPINFER_PROGRESS_FD:-none} > " + dir.file("fd") + "; " +
                                               reporting_worker(1, 2, "0"), 30s);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(read_file(dir.file("fd")), "none\n");
  EXPECT_FALSE(contains(quiet.err, " images")) << quiet.err;

  RunResult bad = run(launch({"--progress-interval", "-1", "--", "true"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "--progress-interval: expected seconds >= 0")) << bad.err;
}

TEST(LaunchProcess, WorkersThatReportNothingShowNoProgress) {
  RunResult r = launch_sh({"--nproc-per-node", "2", "--progress-interval", "0.05"}, "sleep 0.3; echo hi");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, " images")) << r.err;
}

TEST(LaunchProcess, GarbageOnTheProgressPipeIsIgnored) {
  RunResult r = launch_sh({"--progress-interval", "30"},
                          "printf 'hello\\n{\"rank\": 0, \"world\"\\n[1,2]\\n' >&3; "
                          "printf '{\"rank\":0,\"world\":1,\"done\":3,\"skipped\":1,\"failed\":0,\"todo\":4,\"total\":4}\\n' >&3; "
                          "head -c 200000 /dev/zero >&3; echo ok");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] ok\n");
  EXPECT_TRUE(contains(r.err, "[dpinfer] 4/4 images (100.0%), 1 skipped\n")) << r.err;
}

TEST(LaunchProcess, ADescendantHoldingTheProgressPipeDoesNotHoldUpTheLauncher) {
  TempDir dir;
  // The sleeper leaves the worker's process group and keeps only fd 3 open.
  RunResult r = launch_sh({}, "setsid sh -c 'echo $$ > " + dir.file("pid") + "; exec sleep 30' </dev/null >/dev/null 2>&1 & "
                          "while [ ! -s " + dir.file("pid") + " ]; do sleep 0.01; done; exit 0",
                          30s);
  pid_t sleeper = read_pid(dir.file("pid"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 10) << "the launcher stopped reading the pipe after the drain period";
  if (sleeper > 0) ::kill(sleeper, SIGKILL);
}

// On a terminal the line is redrawn in place and erased before other output.
TEST(LaunchProcess, OnATerminalTheProgressLineNeverGarblesWorkerLines) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "util-linux script(1) is not installed";
  TempDir dir;
  write_file(dir.file("worker.sh"), reporting_worker(2, 3, "0.3") + "\n");
  std::string cmd = dpinfer_binary() + " launch --nproc-per-node 2 -- sh " + dir.file("worker.sh");
  RunResult r = run({"script", "-qfec", cmd, "/dev/null"}, {{"CUDA_VISIBLE_DEVICES", ""}, {"TERM", "xterm"}}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string& tty = r.out;  // stdout and stderr, as the terminal got them
  const std::string clear = "\r\x1b[K";
  EXPECT_TRUE(contains(tty, "\r[dpinfer] ")) << "the line is drawn in place";
  EXPECT_TRUE(contains(tty, clear)) << "and erased";
  EXPECT_TRUE(contains(tty, clear + "[dpinfer] 6/6 images (100.0%), ")) << "the last state stays: " << tty;
  auto starts_a_line = [&](size_t p) {
    return p == 0 || tty[p - 1] == '\n' || (p >= clear.size() && tty.compare(p - clear.size(), clear.size(), clear) == 0);
  };
  int worker_lines = 0;
  for (size_t p = tty.find("[rank "); p != std::string::npos; p = tty.find("[rank ", p + 1)) {
    EXPECT_TRUE(starts_a_line(p)) << "a worker line glued to the status line at " << p << ": " << tty;
    size_t end = tty.find('\n', p);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(tty.substr(p, end - p).find('\x1b'), std::string::npos) << "no escape inside a worker line";
    ++worker_lines;
  }
  EXPECT_EQ(worker_lines, 16);
  for (size_t p = tty.find("[dpinfer] "); p != std::string::npos; p = tty.find("[dpinfer] ", p + 1))
    EXPECT_TRUE(starts_a_line(p) || tty[p - 1] == '\r') << "at " << p << ": " << tty;
}

// ---- Issue 11: hardening from two outside audits (launcher items) ----

// Item 15: `torchrun --nproc-per-node 2 run.py` typed as `dpinfer launch` read the
// script as prompts and drew pictures of Python code, exit 0.
TEST(LaunchProcess, AScriptGivenAsPromptsIsRefusedWithTheDashDashHint) {
  TempDir dir;
  write_file(dir.file("run.py"), "import torch\nprint('training')\n");
  write_file(dir.file("train"), "#!/bin/sh\necho training\n");
  for (const std::string& script : {dir.file("run.py"), dir.file("train")}) {
    RunResult r = run(launch({"--nproc-per-node", "2", script}), {{"CUDA_VISIBLE_DEVICES", ""}});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "to run a program as the worker, put it after '--'")) << r.err;
    EXPECT_FALSE(contains(r.out + r.err, "[rank ")) << "no worker started";
  }
}

// Item 9: what the launcher can see without LibTorch is reported once, before any
// worker starts, not by every rank after LibTorch loads.
TEST(LaunchProcess, BadPromptsModelOrOutIsOneLineBeforeAnyWorkerStarts) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red circle\n");
  write_file(dir.file("afile"), "");
  std::filesystem::create_directories(dir.file("notamodel/unet"));
  const std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", ""}, {"HF_HUB_CACHE", dir.file("hub")}};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{dir.file("missing.txt")}, "missing.txt': No such file or directory"},
      {{dir.file("p.txt"), "--model", dir.file("notamodel")}, "has no model_index.json"},
      {{dir.file("p.txt"), "--model", dir.file("notamodel/unet")}, "has no model_index.json"},
      {{dir.file("p.txt"), "--model", "no-such-org/no-such-model"}, "models--no-such-org--no-such-model' does not exist"},
      {{dir.file("p.txt"), "--model", dir.file("typo")}, "is neither a directory"},
      {{dir.file("p.txt"), "--out", dir.file("afile")}, "is a file, not a directory"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {"--nproc-per-node", "3", "--max-restarts", "2"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = run(launch(argv), env);
    EXPECT_EQ(r.exit_code, 2) << message << ": " << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_FALSE(contains(r.out + r.err, "[rank ")) << "no worker started: " << r.err;
  }
  // An existing --out that cannot be written (a read-only filesystem: root may write anywhere else).
  TmpfsMount ro(dir.file("ro"), "64k", /*read_only=*/true);
  if (!ro.ok()) GTEST_SKIP() << ro.why();
  RunResult r = run(launch({"--nproc-per-node", "3", dir.file("p.txt"), "--out", dir.file("ro")}), env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "is not writable (Read-only file system)")) << r.err;
}

// Item 16: torchrun's --no-python and -m, ${local_rank}, --rdzv-*.
TEST(LaunchProcess, TorchrunsProgramFormsAndLocalRankMacroWork) {
  TempDir dir;
  RunResult np = run(launch({"--nproc-per-node", "2", "--no-python", "sh", "-c", "echo np $1", "sh", "lr=${local_rank}"}),
                     {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(np.exit_code, 0) << np.err;
  EXPECT_TRUE(contains(np.out, "[rank 1] np lr=1\n")) << np.out;
  EXPECT_TRUE(contains(np.out, "[rank 0] np lr=0\n")) << np.out;
  write_file(dir.file("dpinfer_test_mod.py"),
             "import os, sys\nprint('module', os.environ['RANK'], sys.argv[1:])\n");
  RunResult m = run(launch({"--nproc-per-node", "2", "-m", "dpinfer_test_mod", "--local-rank=${local_rank}"}),
                    {{"CUDA_VISIBLE_DEVICES", ""}, {"PYTHONPATH", dir.path()}});
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_TRUE(contains(m.out, "[rank 1] module 1 ['--local-rank=1']")) << m.out;
}

TEST(LaunchProcess, RdzvEndpointAndIdSetTheStoreAddressAndRunId) {
  const std::string port = std::to_string(free_port());
  RunResult r = launch_sh({"--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + port,
                           "--rdzv-id", "job42", "--monitor-interval", "1", "--start-method", "spawn"},
                          "echo $MASTER_ADDR:$MASTER_PORT $TORCHELASTIC_RUN_ID");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] 127.0.0.1:" + port + " job42\n")) << r.out;
}

TEST(LaunchProcess, ALaunchOptionAfterPromptsSaysWhereItBelongs) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red circle\n");
  RunResult r = run(launch({dir.file("p.txt"), "--nproc-per-node", "2"}), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "'--nproc-per-node' is a launch option, but it comes after PROMPTS")) << r.err;
  RunResult h = run({dpinfer_binary(), "launch", "--help"});
  EXPECT_TRUE(contains(h.out, "dpinfer generate --help")) << h.out;
}

// Item 17: a Python worker's print() arrives while it runs (torchrun runs `python -u`).
TEST(LaunchProcess, PythonWorkerOutputArrivesWhileItRuns) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  Child launcher(launch({"--", "/usr/bin/python3", "-c", "import time; print('first', flush=False); time.sleep(3)"}),
                 {{"CUDA_VISIBLE_DEVICES", ""}}, {"PYTHONUNBUFFERED"});
  EXPECT_TRUE(wait_until([&] { return contains(launcher.out_so_far(), "[rank 0] first\n"); }, 2.5s))
      << "the line came only at exit: " << launcher.out_so_far();
  EXPECT_EQ(launcher.wait(20s).exit_code, 0);
}

// Item 17: tqdm's "\r" redraws neither vanish nor overwrite the prefix.
TEST(LaunchProcess, CarriageReturnRedrawsArePrefixedLines) {
  RunResult r = launch_sh({}, "printf '\\r  0%%|   |\\r 50%%|#  |' >&2; sleep 0.2; printf '\\r100%%|###|\\n' >&2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "[rank 0]   0%|   |\n[rank 0]  50%|#  |\n[rank 0] 100%|###|\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "\r")) << r.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

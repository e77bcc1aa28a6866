#include "dpinfer/launcher/launcher.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>

#include "dpinfer/launcher/command_error.h"
#include "dpinfer/launcher/host.h"
#include "dpinfer/launcher/slurm_layout.h"
#include "dpinfer/launcher/worker_env.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/preflight.h"
#include "dpinfer/plan/run_token.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/exit_status.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/signal_names.h"

namespace dpinfer::launcher {
namespace {

/// torchrun's default port when several nodes must agree on one.
constexpr int kDefaultMultiNodePort = 29500;
constexpr const char* kWorkerExecutable = "dpinfer-worker";

int resolve_master_port(const LaunchOptions& o) {
  if (!o.master_port || *o.master_port == 0) {
    if (o.nnodes == 1) return pick_free_port();
    if (o.master_port)
      throw UsageError("--master-port 0 (pick a free port) works on a single node only; "
                       "with --nnodes > 1 every node must be given the same port");
    if (o.node_rank == 0) check_port_available(kDefaultMultiNodePort);
    return kDefaultMultiNodePort;
  }
  // Rank 0's store binds the port on node 0, so only node 0 can check it.
  if (o.node_rank == 0) check_port_available(*o.master_port);
  return *o.master_port;
}

/// argv and executable of the worker, from the words after the launch options.
SpawnSpec worker_command(const LaunchOptions& o) {
  SpawnSpec spec;
  if (o.worker_args.front() == "--") {
    spec.argv.assign(o.worker_args.begin() + 1, o.worker_args.end());
    spec.path = resolve_command(spec.argv.front());
  } else {
    if (o.worker_args.front() == "-")
      throw UsageError("PROMPTS '-': dpinfer launch gives its workers no stdin (and several ranks could not share "
                       "one); write the prompts to a file and pass its path");
    spec.path = find_generate_worker();
    spec.argv = {spec.path, "generate"};
    spec.argv.insert(spec.argv.end(), o.worker_args.begin(), o.worker_args.end());
  }
  return spec;
}

/// RLIMIT_NOFILE's soft value, or -1 when unlimited or unknown.
long open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return -1;
  return lim.rlim_cur > static_cast<rlim_t>(std::numeric_limits<long>::max()) ? -1 : static_cast<long>(lim.rlim_cur);
}

/// A fresh DIR/RUN_ID_XXXXXX for this launcher run, as torchrun makes one: a second
/// run with the same --log-dir and --run-id must not truncate the first one's logs.
std::string make_run_log_dir(const std::string& log_dir, const std::string& run_id) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) throw Error("--log-dir: cannot create '" + log_dir + "': " + ec.message());
  std::string path = log_dir + "/" + run_id + "_XXXXXX";
  if (::mkdtemp(path.data()) == nullptr)
    throw Error("--log-dir: cannot create a directory in '" + log_dir + "': " + std::strerror(errno));
  return path;
}

void print_lines(const std::vector<std::string>& lines) {
  for (const auto& l : lines) log::info("{}", l);
}

}  // namespace

std::string find_generate_worker() {
  const std::string dir = self_exe_dir();
  // Next to dpinfer in the build tree; once installed, in LIBEXECDIR/dpinfer, as seen
  // from BINDIR (src/CMakeLists.txt works the relative path out from GNUInstallDirs).
  const std::string installed = dir + "/" + DPINFER_BIN_TO_WORKER_DIR;
  for (const std::string& candidate : {dir + "/" + kWorkerExecutable, installed + "/" + kWorkerExecutable}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw CommandError("this dpinfer build has no image-generation worker ('" + std::string(kWorkerExecutable) +
                         "' is neither in " + dir + " nor in " + installed +
                         "); build dpinfer with LibTorch (see README), or launch "
                         "your own worker with: dpinfer launch -- CMD ARGS...",
                     exit_status::kNotFound);
}

std::vector<std::string> failure_summary(const AttemptResult& result, int attempt, int max_restarts) {
  std::vector<std::string> out;
  if (!result.root_cause) return out;
  const RankOutcome& root = result.ranks[*result.root_cause];
  out.push_back("worker group failed (attempt " + std::to_string(attempt + 1) + " of " +
                std::to_string(max_restarts + 1) + ")");
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", root.seconds);
  out.push_back("  root cause: rank " + std::to_string(root.rank) + " (local rank " + std::to_string(root.local_rank) +
                (root.pid > 0 ? ", pid " + std::to_string(root.pid) : std::string()) + ") " +
                (root.exec_error.empty() ? (root.termination.signaled ? "was killed by " : "exited with ") +
                                               root.termination.describe()
                                         : root.exec_error) +
                " after " + secs + "s");
  const auto& tail = !root.stderr_tail.empty() ? root.stderr_tail : root.stdout_tail;
  if (!tail.empty()) {
    out.push_back("  last " + std::to_string(tail.size()) + " line(s) of its " +
                  (!root.stderr_tail.empty() ? "stderr" : "stdout") + ":");
    for (const auto& l : tail) out.push_back("    | " + l);
  } else {
    out.push_back("  it printed nothing");
  }
  for (size_t i = 0; i < result.ranks.size(); ++i) {
    if (i == *result.root_cause) continue;
    const RankOutcome& r = result.ranks[i];
    std::string how = r.termination.ok() ? "exited with exit code 0" : (r.termination.signaled ? "killed by " : "exited with ") + r.termination.describe();
    if (r.signaled_by_launcher && !r.termination.ok()) how += " after dpinfer stopped it";
    out.push_back("  rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " + how);
  }
  return out;
}

/// Why restarting after this root cause would only fail the same way, or nullptr.
/// `own_worker`: the worker is dpinfer's (the PROMPTS form), whose exit 2 is bad input.
const char* futile_restart(const RankOutcome& root, bool own_worker) {
  if (!root.exec_error.empty()) return "the worker command cannot be executed";
  if (own_worker && !root.termination.signaled && root.termination.code == exit_status::kBadInput)
    return "dpinfer's worker rejected its input (exit status 2); fix it and run again";
  return nullptr;
}

int run_launch(const LaunchOptions& given) {
  // Under srun, one launcher per node: the node layout comes from the step.
  LaunchOptions o = given;
  for (const std::string& line : apply_slurm_step(o, current_environment())) log::debug("{}", line);
  o.validate();
  if (o.worker_args.front() != "--") {
    // The workers' own parser, here once: a bad generate option is then one line
    // before anything starts, not one per worker and per restart, and --help prints
    // generate's help once. Then what can be checked without LibTorch: the prompts
    // file, --out and --model (plan/preflight.h), which every rank would otherwise
    // report after loading LibTorch. A --dry-run stops after the command line, before
    // the devices are counted, so that it checks a GPU box's command on any machine.
    std::vector<std::string> words;
    for (const std::string& w : o.worker_args) words.push_back(substitute_local_rank(w, 0));
    std::string help;
    const plan::GenerateOptions g = plan::parse_generate_args(words, &help);
    if (!help.empty()) {
      std::cout << help;
      return exit_status::kSuccess;
    }
    if (g.dry_run) {
      std::cout << g.to_json().dump(2) << "\n";
      log::info("dry run: the launch and generate options are valid; no worker started");
      return exit_status::kSuccess;
    }
    if (g.prompts != "-") plan::check_prompts_path(g.prompts);
    plan::check_output_dir(g.out);
    plan::check_model_spec(g.model);
  }
  const bool needs_devices = o.nproc_per_node == "auto" || o.nproc_per_node == "gpu";
  const int nproc = resolve_nproc_per_node(o.nproc_per_node, needs_devices ? count_cuda_devices() : 0,
                                           count_usable_cpus());
  for (int r : o.output.local_ranks_filter) {
    if (r >= nproc)
      throw UsageError("--local-ranks-filter: local rank " + std::to_string(r) + " does not exist with " +
                       std::to_string(nproc) + " process(es) per node");
  }
  check_nproc_fits_fd_limit(nproc, open_file_limit());
  const SpawnSpec command = worker_command(o);
  const bool auto_port = !o.master_port || *o.master_port == 0;

  GroupEnv group;
  group.layout = {o.nnodes, o.node_rank, nproc};
  group.master_addr = o.master_addr;
  group.master_port = resolve_master_port(o);
  group.role = o.role;
  group.run_id = o.run_id;
  group.max_restarts = o.max_restarts;

  const EnvMap inherited = current_environment();
  // One node: a fresh secret for this run, which only its workers see (plan/run_token.h).
  // Several nodes' launchers cannot agree on one without talking: their workers take the
  // user's DPINFER_RUN_TOKEN, or the token file in the --out they share.
  if (o.nnodes == 1 && inherited.count(plan::kRunTokenEnv) == 0) group.run_token = plan::make_run_token();
  if (sets_omp_num_threads(inherited, group.layout))
    log::info("setting OMP_NUM_THREADS=1 for each worker so that {} workers do not oversubscribe the CPU; "
              "set OMP_NUM_THREADS yourself to change this",
              nproc);

  if (!o.output.log_dir.empty()) o.output.run_log_dir = make_run_log_dir(o.output.log_dir, o.run_id);
  prepare_launcher_process();
  for (int attempt = 0;; ++attempt) {
    group.restart_count = attempt;
    if (attempt > 0 && auto_port && o.nnodes == 1) group.master_port = pick_free_port();
    std::vector<RankSpec> ranks;
    for (int local = 0; local < nproc; ++local) {
      RankSpec r;
      r.local_rank = local;
      r.rank = group.layout.global_rank(local);
      r.spawn = command;
      // torchrun's ${local_rank} in the worker's arguments (not in the program's name).
      for (size_t i = 1; i < r.spawn.argv.size(); ++i) r.spawn.argv[i] = substitute_local_rank(r.spawn.argv[i], local);
      r.spawn.envp = to_envp(worker_env(inherited, group, local));
      ranks.push_back(std::move(r));
    }
    log::debug("attempt {}: {} worker(s) on node {}/{} (world size {}), master {}:{}", attempt, nproc, o.node_rank,
               o.nnodes, group.layout.world_size(), group.master_addr, group.master_port);
    AttemptResult result = run_attempt(ranks, o.output, o.grace_period_s, attempt);
    if (result.interrupted_by && !result.root_cause) {
      log::warn("interrupted by {}; all workers have ended", signal_name(result.interrupted_by));
      return exit_status::kSignalBase + result.interrupted_by;
    }
    if (result.ok()) return exit_status::kSuccess;
    print_lines(failure_summary(result, attempt, o.max_restarts));
    const RankOutcome& root = result.ranks[*result.root_cause];
    if (result.interrupted_by) {
      // The signal came during the failure's teardown: the failure stays the story.
      log::warn("{} arrived while stopping the group after rank {} failed; not restarting",
                signal_name(result.interrupted_by), root.rank);
    } else if (attempt < o.max_restarts) {
      if (const char* why = futile_restart(root, o.worker_args.front() != "--")) {
        log::info("not restarting: {}", why);
      } else {
        log::info("restarting the worker group: restart {} of {} (TORCHELASTIC_RESTART_COUNT={})", attempt + 1,
                  o.max_restarts, attempt + 1);
        continue;
      }
    }
    int status = root.termination.shell_status();
    log::info("exit status {} (that of rank {})", status, root.rank);
    return status;
  }
}

}  // namespace dpinfer::launcher

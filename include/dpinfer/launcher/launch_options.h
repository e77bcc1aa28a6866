#pragma once
// What `dpinfer launch` was asked to do, after parsing and before anything runs.

#include <optional>
#include <string>
#include <vector>

namespace dpinfer::launcher {

/// The longest --grace-period: a day. Longer ones are surely typos (or `inf`), and
/// would overflow the supervisor's nanosecond deadlines.
constexpr double kMaxGracePeriodS = 86400;

/// Where worker output goes. `--log-dir` adds per-rank files; the console copy
/// is on unless --quiet, or --log-dir without --tee.
struct OutputOptions {
  std::string log_dir;              ///< empty: no files
  /// This launcher run's own directory under log_dir, DIR/RUN_ID_XXXXXX, made fresh
  /// by run_launch (mkdtemp) so that no run overwrites another's logs; the
  /// attempts write to attempt_N inside it. Set exactly when log_dir is.
  std::string run_log_dir;
  bool tee = false;                 ///< with log_dir: also print to the console
  bool quiet = false;               ///< print no worker output on the console
  std::vector<int> local_ranks_filter;  ///< empty: every local rank reaches the console
  /// The aggregated progress line (progress.h): seconds between plain lines when
  /// stderr is not a terminal; 0 turns the line off, as --quiet does.
  double progress_interval_s = 30.0;
};

struct LaunchOptions {
  std::string nproc_per_node = "1";  ///< N, "auto", "gpu" or "cpu", resolved at start
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  ///< unset: a free port on a single node, 29500 on several
  /// Given on the command line: a SLURM step's layout (slurm_layout.h) is then not used.
  bool nnodes_given = false, node_rank_given = false, master_addr_given = false;
  int max_restarts = 0;
  double grace_period_s = 30.0;  ///< between SIGTERM and SIGKILL, at most kMaxGracePeriodS
  std::string run_id = "none";
  std::string role = "default";
  OutputOptions output;

  /// The worker command: either {"--", CMD, ARGS...} or {PROMPTS, generate options...}.
  std::vector<std::string> worker_args;

  /// Checks what can be checked without touching the system; throws UsageError.
  void validate() const;
};

/// Launcher file descriptors per worker: the stdout, stderr, report and progress
/// pipes' read ends, their write ends while it is being spawned, and two log files.
constexpr long kFdsPerWorker = 8;
/// Descriptors kept for the launcher itself (stdio, signalfd, the life pipe, libc).
constexpr long kLauncherOwnFds = 64;

/// The most workers one launcher can run under a descriptor limit (RLIMIT_NOFILE's
/// soft value; negative: unlimited).
long max_nproc_for_fd_limit(long fd_limit);

/// Throws UsageError naming the limit and `ulimit -n` when `nproc` workers need
/// more descriptors than `fd_limit` allows.
void check_nproc_fits_fd_limit(int nproc, long fd_limit);

/// Parses "--nproc-per-node": a positive integer, or auto/gpu/cpu resolved against
/// `cuda_devices` and `cpus`. Throws UsageError naming the value.
int resolve_nproc_per_node(const std::string& value, int cuda_devices, int cpus);

/// Parses "--master-port": 0..65535 (0: pick a free one). Throws UsageError.
int parse_port(const std::string& value);

/// Parses "0,2,3" for --local-ranks-filter. Throws UsageError.
std::vector<int> parse_rank_list(const std::string& value);

}  // namespace dpinfer::launcher

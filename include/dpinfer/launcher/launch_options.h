#pragma once
// What `dpinfer launch` was asked to do, after parsing and before anything runs.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dpinfer::launcher {

/// The longest --grace-period: a day. Longer ones are surely typos (or `inf`), and
/// would overflow the supervisor's nanosecond deadlines.
constexpr double kMaxGracePeriodS = 86400;

/// torchrun's stream selector of --redirects and --tee: 0 neither stream, 1 stdout,
/// 2 stderr, 3 both; one value for every local rank ("3"), or LOCAL_RANK:VALUE pairs
/// ("0:3,1:2"), where an unnamed local rank gets 0 (torch/distributed/elastic/
/// multiprocessing/api.py, Std.from_str and to_map).
struct StreamSpec {
  static constexpr int kStdout = 1, kStderr = 2;
  int all = 0;                    ///< when per_rank is empty
  std::map<int, int> per_rank;    ///< local rank -> value
  bool given = false;
  /// The streams (kStdout | kStderr) selected for `local_rank`.
  int streams(int local_rank) const;
};

/// Parses the value of `option` (--redirects or --tee). Throws UsageError naming both.
StreamSpec parse_stream_spec(const std::string& option, const std::string& value);

/// True for a word that has the form of a StreamSpec value ("3", "0:1,1:2").
bool looks_like_stream_spec(const std::string& word);

/// Where worker output goes, as under torchrun: the console gets every stream unless
/// --quiet, or --redirects sends it to the files only (--tee keeps a console copy of
/// a redirected stream). With --log-dir every rank's stdout and stderr also go to
/// DIR/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log, torchrun's layout.
struct OutputOptions {
  std::string log_dir;              ///< empty: no files
  /// This launcher run's own directory under log_dir, DIR/RUN_ID_XXXXXX, made fresh
  /// by run_launch (mkdtemp) so that no run overwrites another's logs; the
  /// attempts write to attempt_N inside it. Set exactly when log_dir is.
  std::string run_log_dir;
  StreamSpec redirects;             ///< -r/--redirects: these streams go to the files only
  StreamSpec tee;                   ///< -t/--tee: these streams go to the console as well
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
  /// --no-python CMD and -m MODULE (torchrun's) arrive here in the first form, the
  /// latter as {"--", PYTHON, "-u", "-m", MODULE, ARGS...}.
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

/// A rendezvous endpoint "HOST[:PORT]" ("[::1]:29400" for IPv6) split as torchrun's
/// parse_rendezvous_endpoint does; the port is `default_port` when absent (-1: none).
/// Throws UsageError naming --rdzv-endpoint.
std::pair<std::string, int> parse_rdzv_endpoint(const std::string& value, int default_port);

/// `arg` with torchrun's "${local_rank}" and "$local_rank" replaced by `local_rank`
/// (torch/distributed/elastic/utils/api.py, macros.substitute). Unlike Python's
/// string.Template, "$$" stays as it is, so that `sh -c 'echo $$'` keeps its meaning.
std::string substitute_local_rank(const std::string& arg, int local_rank);

}  // namespace dpinfer::launcher

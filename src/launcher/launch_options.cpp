#include "dpinfer/launcher/launch_options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "dpinfer/util/error.h"

namespace dpinfer::launcher {
namespace {

/// A whole decimal integer in [min, max], or nullopt.
std::optional<long> parse_int(const std::string& s, long min, long max) {
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return std::nullopt;
  return v;
}

}  // namespace

int resolve_nproc_per_node(const std::string& value, int cuda_devices, int cpus) {
  if (value == "auto") return cuda_devices > 0 ? cuda_devices : 1;
  if (value == "gpu") {
    if (cuda_devices <= 0)
      throw UsageError(
          "--nproc-per-node gpu: no CUDA device is visible on this machine "
          "(check CUDA_VISIBLE_DEVICES and the driver, or use a number, auto or cpu)");
    return cuda_devices;
  }
  if (value == "cpu") return cpus > 0 ? cpus : 1;
  auto n = parse_int(value, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
  if (!n || *n < 1)
    throw UsageError("--nproc-per-node: expected a positive integer, auto, gpu or cpu, got '" +
                     value + "'");
  return static_cast<int>(*n);
}

int parse_port(const std::string& value) {
  auto p = parse_int(value, 0, 65535);
  if (!p) throw UsageError("--master-port: expected a TCP port in 0..65535, got '" + value + "'");
  return static_cast<int>(*p);
}

std::vector<int> parse_rank_list(const std::string& value) {
  std::vector<int> ranks;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string part = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto r = parse_int(part, 0, std::numeric_limits<int>::max());
    if (!r)
      throw UsageError("--local-ranks-filter: expected comma-separated local ranks such as 0,2, got '" +
                       value + "'");
    ranks.push_back(static_cast<int>(*r));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ranks;
}

long max_nproc_for_fd_limit(long fd_limit) {
  if (fd_limit < 0) return std::numeric_limits<int>::max();
  return std::max(0L, (fd_limit - kLauncherOwnFds) / kFdsPerWorker);
}

void check_nproc_fits_fd_limit(int nproc, long fd_limit) {
  const long most = max_nproc_for_fd_limit(fd_limit);
  if (nproc > most)
    throw UsageError("--nproc-per-node " + std::to_string(nproc) + ": the open-file limit of " +
                     std::to_string(fd_limit) + " allows at most " + std::to_string(most) +
                     " workers per launcher (about " + std::to_string(kFdsPerWorker) +
                     " descriptors each); use fewer, or raise it with 'ulimit -n " +
                     std::to_string(kLauncherOwnFds + kFdsPerWorker * static_cast<long>(nproc)) + "'");
}

void LaunchOptions::validate() const {
  if (nproc_per_node != "auto" && nproc_per_node != "gpu" && nproc_per_node != "cpu")
    resolve_nproc_per_node(nproc_per_node, 0, 1);  // throws on anything but a positive integer
  if (nnodes < 1) throw UsageError("--nnodes: expected at least 1, got " + std::to_string(nnodes));
  if (node_rank < 0 || node_rank >= nnodes)
    throw UsageError("--node-rank: expected 0.." + std::to_string(nnodes - 1) + " for --nnodes " +
                     std::to_string(nnodes) + ", got " + std::to_string(node_rank));
  if (master_port && (*master_port < 0 || *master_port > 65535))
    throw UsageError("--master-port: expected a TCP port in 0..65535, got " +
                     std::to_string(*master_port));
  if (master_addr.empty()) throw UsageError("--master-addr: expected a host name or address, got ''");
  if (max_restarts < 0)
    throw UsageError("--max-restarts: expected 0 or more, got " + std::to_string(max_restarts));
  if (!(grace_period_s >= 0) || grace_period_s > kMaxGracePeriodS)
    throw UsageError("--grace-period: expected seconds in 0.." + std::to_string(static_cast<int>(kMaxGracePeriodS)) +
                     " (SIGKILL that long after SIGTERM), got " + std::to_string(grace_period_s));
  if (!(output.progress_interval_s >= 0) || !std::isfinite(output.progress_interval_s))
    throw UsageError("--progress-interval: expected seconds >= 0 (0 turns the progress line off), got " +
                     std::to_string(output.progress_interval_s));
  // The run id names the --log-dir subdirectory: it must stay one path component inside DIR.
  if (run_id.empty() || run_id.find('/') != std::string::npos || run_id.front() == '.')
    throw UsageError("--run-id '" + run_id +
                     "': expected a name without '/' that does not start with '.' (it names the run's "
                     "--log-dir subdirectory), e.g. --run-id job42");
  if (output.tee && output.log_dir.empty())
    throw UsageError("--tee copies the --log-dir files to the console; give --log-dir DIR too");
  if (output.tee && output.quiet) throw UsageError("--tee and --quiet contradict each other; pick one");
  if (worker_args.empty() || (worker_args.size() == 1 && worker_args[0] == "--"))
    throw UsageError(
        "nothing to launch: give a prompts file (dpinfer launch PROMPTS) or a command after "
        "'--' (dpinfer launch -- CMD ARGS...)");
}

}  // namespace dpinfer::launcher

#include "dpinfer/launcher/launch_options.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

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

int StreamSpec::streams(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

bool looks_like_stream_spec(const std::string& word) {
  return !word.empty() && word.find_first_not_of("0123456789:,") == std::string::npos;
}

StreamSpec parse_stream_spec(const std::string& option, const std::string& value) {
  StreamSpec spec;
  spec.given = true;
  auto bad = [&] {
    return UsageError(option + " " + quote(value) +
                      ": expected 0 (no stream), 1 (stdout), 2 (stderr) or 3 (both) for every local rank, or "
                      "LOCAL_RANK:VALUE pairs such as 0:3,1:2, as torchrun takes them");
  };
  if (value.find(':') == std::string::npos) {
    auto v = parse_int(value, 0, 3);
    if (!v) throw bad();
    spec.all = static_cast<int>(*v);
    return spec;
  }
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string pair = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = pair.find(':');
    if (colon == std::string::npos) throw bad();
    auto rank = parse_int(pair.substr(0, colon), 0, std::numeric_limits<int>::max());
    auto v = parse_int(pair.substr(colon + 1), 0, 3);
    if (!rank || !v) throw bad();
    spec.per_rank[static_cast<int>(*rank)] = static_cast<int>(*v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return spec;
}

std::pair<std::string, int> parse_rdzv_endpoint(const std::string& value, int default_port) {
  std::string host = value, port_text;
  if (!value.empty() && value.front() == '[') {
    const size_t close = value.find(']');
    if (close == std::string::npos)
      throw UsageError("--rdzv-endpoint " + quote(value) + ": an IPv6 address needs its closing ']', e.g. [::1]:29400");
    host = value.substr(1, close - 1);
    if (close + 1 < value.size()) {
      if (value[close + 1] != ':')
        throw UsageError("--rdzv-endpoint " + quote(value) + ": expected HOST:PORT, e.g. [::1]:29400");
      port_text = value.substr(close + 2);
    }
  } else if (const size_t colon = value.rfind(':'); colon != std::string::npos) {
    host = value.substr(0, colon);
    port_text = value.substr(colon + 1);
  }
  if (host.empty()) throw UsageError("--rdzv-endpoint " + quote(value) + ": expected HOST:PORT, e.g. node0:29400");
  int port = default_port;
  if (!port_text.empty() || value.back() == ':') {
    auto p = parse_int(port_text, 0, 65535);
    if (!p) throw UsageError("--rdzv-endpoint " + quote(value) + ": the port must be in 0..65535");
    port = static_cast<int>(*p);
  }
  return {host, port};
}

std::string substitute_local_rank(const std::string& arg, int local_rank) {
  static const std::string kBraced = "${local_rank}", kBare = "$local_rank";
  const std::string rank = std::to_string(local_rank);
  std::string out;
  size_t i = 0;
  while (i < arg.size()) {
    if (arg.compare(i, kBraced.size(), kBraced) == 0) {
      out += rank;
      i += kBraced.size();
      continue;
    }
    // $local_rank as a whole identifier: not $local_rank_x nor $local_ranks.
    if (arg.compare(i, kBare.size(), kBare) == 0) {
      const size_t end = i + kBare.size();
      const bool more = end < arg.size() && (std::isalnum(static_cast<unsigned char>(arg[end])) || arg[end] == '_');
      if (!more) {
        out += rank;
        i = end;
        continue;
      }
    }
    out += arg[i++];
  }
  return out;
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
  const std::pair<const StreamSpec*, const char*> streams[] = {{&output.redirects, "--redirects"},
                                                                 {&output.tee, "--tee"}};
  for (const auto& [spec, name] : streams) {
    if (spec->given && output.log_dir.empty())
      throw UsageError(std::string(name) + " selects which worker streams go to the --log-dir files; give --log-dir DIR too");
  }
  if (output.tee.given && output.quiet) throw UsageError("--tee and --quiet contradict each other; pick one");
  if (worker_args.empty() || (worker_args.size() == 1 && worker_args[0] == "--"))
    throw UsageError(
        "nothing to launch: give a prompts file (dpinfer launch PROMPTS) or a command after "
        "'--' (dpinfer launch -- CMD ARGS...)");
}

}  // namespace dpinfer::launcher

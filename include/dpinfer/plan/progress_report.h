#pragma once
// The progress reports a worker sends its launcher: the wire format both sides share.
//
// Each worker that the launcher starts gets the write end of a private pipe at
// fd 3 and DPINFER_PROGRESS_FD=3. dpinfer's own worker writes one JSON line per
// update there (at most about 4 a second, never blocking, plus one at the end):
//
//   {"rank":1,"world":2,"done":3,"skipped":0,"failed":0,"todo":5,"total":10}
//
// done, skipped and failed count this rank's items so far; todo is how many items
// the rank was given (skipped ones included), or -1 in dynamic mode, where no
// rank knows in advance; total is the number of items in the run (in this
// --shard). With peers on other nodes, rank 0 adds "group": the whole run's
// done/skipped/failed, read from the store, so that node 0's launcher shows the
// run's progress and not only its own node's.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dpinfer::plan {

/// The environment variable that names the progress descriptor in a worker.
constexpr const char* kProgressFdEnv = "DPINFER_PROGRESS_FD";
/// The descriptor at which a worker finds the write end of its progress pipe.
constexpr int kWorkerProgressFd = 3;

struct ProgressCounts {
  int64_t done = 0;     ///< images generated
  int64_t skipped = 0;  ///< items whose PNG existed already
  int64_t failed = 0;   ///< items whose attempt failed

  int64_t processed() const { return done + skipped + failed; }
};

/// One report of one worker, as it travels on the progress pipe.
struct ProgressReport {
  int rank = 0;
  int world = 1;                        ///< the worker's world size
  ProgressCounts counts;                ///< this rank's items so far
  int64_t todo = -1;                    ///< this rank's items, skipped ones included; -1: not known
  int64_t total = -1;                   ///< items in the run (this shard); -1: not known
  std::optional<ProgressCounts> group;  ///< rank 0 only, with peers on other nodes: the whole run
};

/// The JSON line for `r`, without its '\n'.
std::string format_progress_report(const ProgressReport& r);
/// Parses one line; nullopt when it is not a well-formed report.
std::optional<ProgressReport> parse_progress_report(std::string_view line);

}  // namespace dpinfer::plan

#pragma once
// The launcher's aggregated progress line. The reports it is made of travel from
// each worker on a pipe, in the wire format of plan/progress_report.h.
//
// The launcher sums the reports of its workers (ProgressAggregator) and shows the
// sum on stderr (ProgressDisplay): redrawn in place on a terminal, as a plain line
// every --progress-interval seconds otherwise. Workers that write nothing there
// (any `dpinfer launch -- CMD`) show nothing.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "dpinfer/plan/progress_report.h"

namespace dpinfer::launcher {

using plan::ProgressCounts;
using plan::ProgressReport;

/// What the progress line shows.
struct ProgressSnapshot {
  int64_t processed = 0;  ///< generated + skipped + failed
  int64_t total = -1;     ///< -1: not known
  int64_t skipped = 0;
  int64_t failed = 0;
  double rate = 0;        ///< images (generated or failed) per second over the window; 0: not known yet
  bool node_only = false; ///< counts this node's workers only (other nodes' are not visible here)
};

/// Sums the latest report of every worker of this node. Pure: the caller passes
/// the time, in seconds of any monotonic clock.
class ProgressAggregator {
 public:
  /// `local_ranks`: how many workers run on this node. The rate is measured over
  /// the last `window_s` seconds.
  explicit ProgressAggregator(int local_ranks, double window_s = 60);

  /// Takes a report received at `now_s`. A rank whose counters go back is a new
  /// process (a restart): its new counts replace the old, and the rate counts
  /// from there.
  void add(const ProgressReport& report, double now_s);
  bool has_reports() const { return !latest_.empty(); }
  ProgressSnapshot snapshot() const;

 private:
  struct Sample {
    double t;
    int64_t local_work;  ///< cumulative images worked on by this node's ranks
    int64_t group_work;  ///< the same for the whole run, from rank 0's group counters
  };
  int local_ranks_;
  double window_s_;
  std::map<int, ProgressReport> latest_;  ///< by rank
  std::optional<ProgressCounts> group_;
  int64_t local_work_ = 0, group_work_ = 0;
  std::deque<Sample> samples_;
};

/// "25m48s": whole seconds rounded up (an ETA never says 0s too early), in the
/// two largest units of s, m, h and d; ">99d" beyond.
std::string format_duration(double seconds);

/// The progress line without prefix, e.g.
/// "1234/10000 images (12.3%), 5.67 images/s, ETA 25m48s, 2 failed".
std::string format_progress(const ProgressSnapshot& s);

/// Decides when the progress line is written and produces the bytes to write to
/// stderr. On a terminal the line is a status line, redrawn in place ("\r", the
/// line, no newline) and erased ("\r\x1b[K") before any other output; otherwise
/// it is a plain line every `interval_s` seconds, left out when it would repeat
/// the previous one. Pure, like the aggregator.
class ProgressDisplay {
 public:
  /// Erases the status line and returns the cursor to the start of the line.
  static constexpr std::string_view kClearLine = "\r\x1b[K";
  /// How often a changed status line is redrawn on a terminal, at most.
  static constexpr double kRedrawInterval = 0.25;

  ProgressDisplay(bool terminal, double interval_s, std::string prefix = "[dpinfer] ");

  /// What erases the status line before other output goes to the console; ""
  /// when none is shown.
  std::string hide();
  /// What to write at `now_s`: a redraw, a plain line, or "" when nothing is due.
  /// `columns` (0: unknown) truncates the status line so that it never wraps.
  std::string tick(const ProgressAggregator& progress, double now_s, int columns = 0);
  /// The monotonic time at which tick() may next have something to write, or a
  /// negative value when only a new report can change that.
  double next_due(const ProgressAggregator& progress, double now_s, int columns = 0) const;
  /// At the end of an attempt: the last state as a permanent plain line (the
  /// status line erased first), or "" when no worker ever reported or that line
  /// was the last one printed.
  std::string finish(const ProgressAggregator& progress);

 private:
  std::string line(const ProgressAggregator& progress, int columns) const;
  std::string plain_line(const ProgressAggregator& progress);

  bool terminal_;
  double interval_s_;
  std::string prefix_;
  bool shown_ = false;       ///< a status line is on the screen
  std::string drawn_;        ///< what it says
  double drawn_at_ = -1e300; ///< when it was drawn
  double next_plain_ = -1;   ///< when the next plain line is due; < 0: not started
  std::string printed_;      ///< the last plain line
};

}  // namespace dpinfer::launcher

#include "dpinfer/launcher/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

namespace dpinfer::launcher {
namespace {

/// A rank's counters went back: it is a new process (a restart) that counts from 0.
bool restarted(const ProgressCounts& before, const ProgressCounts& now) {
  return now.done < before.done || now.skipped < before.skipped || now.failed < before.failed;
}

/// Images worked on (generated or failed) since `before`: what the rate measures.
int64_t work_since(const std::optional<ProgressCounts>& before, const ProgressCounts& now) {
  int64_t work = now.done + now.failed;
  if (!before || restarted(*before, now)) return work;
  return work - (before->done + before->failed);
}

}  // namespace

ProgressAggregator::ProgressAggregator(int local_ranks, double window_s)
    : local_ranks_(local_ranks), window_s_(window_s) {}

void ProgressAggregator::add(const ProgressReport& report, double now_s) {
  auto prev = latest_.find(report.rank);
  local_work_ += work_since(prev == latest_.end() ? std::nullopt : std::optional(prev->second.counts), report.counts);
  if (report.group) {
    group_work_ += work_since(group_, *report.group);
    group_ = report.group;
  }
  latest_[report.rank] = report;
  samples_.push_back({now_s, local_work_, group_work_});
  // Keep one sample at or before the window's start, as the rate's anchor.
  while (samples_.size() > 2 && samples_[1].t <= now_s - window_s_) samples_.pop_front();
}

ProgressSnapshot ProgressAggregator::snapshot() const {
  ProgressSnapshot s;
  ProgressCounts local;
  int64_t todo = 0;
  bool todo_known = static_cast<int>(latest_.size()) >= local_ranks_;
  int world = 0;
  for (const auto& [rank, r] : latest_) {
    local.done += r.counts.done;
    local.skipped += r.counts.skipped;
    local.failed += r.counts.failed;
    s.total = std::max(s.total, r.total);
    world = std::max(world, r.world);
    todo += r.todo;
    todo_known = todo_known && r.todo >= 0;
  }
  bool group = false;
  if (world > local_ranks_ && group_) {
    // Rank 0 reads the group counters at its own pace; this node's sum may be fresher.
    group = true;
    s.processed = std::max(group_->processed(), local.processed());
    s.skipped = std::max(group_->skipped, local.skipped);
    s.failed = std::max(group_->failed, local.failed);
  } else {
    s.processed = local.processed();
    s.skipped = local.skipped;
    s.failed = local.failed;
    if (world > local_ranks_) {
      s.node_only = true;
      s.total = todo_known ? todo : -1;
    }
  }
  if (samples_.size() >= 2) {
    const Sample& a = samples_.front();
    const Sample& b = samples_.back();
    double dt = b.t - a.t;
    int64_t dw = group ? b.group_work - a.group_work : b.local_work - a.local_work;
    if (dt > 0 && dw > 0) s.rate = static_cast<double>(dw) / dt;
  }
  return s;
}

std::string format_duration(double seconds) {
  constexpr double kMax = 99.0 * 86400;
  if (!(seconds < kMax)) return ">99d";
  auto s = static_cast<int64_t>(std::ceil(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string format_progress(const ProgressSnapshot& s) {
  std::string out = s.total >= 0 ? fmt::format("{}/{} images", s.processed, s.total) : fmt::format("{} images", s.processed);
  if (s.node_only) out += " on this node";
  if (s.total > 0) {
    // Rounded down, so that 100.0% means done.
    double pct = std::floor(1000.0 * static_cast<double>(s.processed) / static_cast<double>(s.total)) / 10.0;
    out += fmt::format(" ({:.1f}%)", pct);
  }
  if (s.rate > 0) {
    out += fmt::format(", {:.2f} images/s", s.rate);
    if (s.total >= 0 && s.processed < s.total)
      out += ", ETA " + format_duration(static_cast<double>(s.total - s.processed) / s.rate);
  }
  if (s.failed) out += fmt::format(", {} failed", s.failed);
  if (s.skipped) out += fmt::format(", {} skipped", s.skipped);
  return out;
}

ProgressDisplay::ProgressDisplay(bool terminal, double interval_s, std::string prefix)
    : terminal_(terminal), interval_s_(interval_s), prefix_(std::move(prefix)) {}

std::string ProgressDisplay::line(const ProgressAggregator& progress, int columns) const {
  std::string text = prefix_ + format_progress(progress.snapshot());
  // One column short of the width: a line that fills it wraps on some terminals.
  if (columns > 1 && text.size() > static_cast<size_t>(columns - 1)) text.resize(static_cast<size_t>(columns - 1));
  return text;
}

std::string ProgressDisplay::hide() {
  if (!shown_) return "";
  shown_ = false;
  return std::string(kClearLine);
}

std::string ProgressDisplay::tick(const ProgressAggregator& progress, double now_s, int columns) {
  if (!progress.has_reports()) return "";
  if (!terminal_) {
    if (next_plain_ < 0) next_plain_ = now_s + interval_s_;
    if (now_s < next_plain_) return "";
    next_plain_ += interval_s_;
    if (next_plain_ <= now_s) next_plain_ = now_s + interval_s_;  // after a stall: no burst of lines
    return plain_line(progress);
  }
  std::string text = line(progress, columns);
  // Back after other output: at once. A change to what is shown: at most every kRedrawInterval.
  if (shown_ && (text == drawn_ || now_s < drawn_at_ + kRedrawInterval)) return "";
  shown_ = true;
  drawn_ = text;
  drawn_at_ = now_s;
  return "\r" + text + "\x1b[K";
}

double ProgressDisplay::next_due(const ProgressAggregator& progress, double now_s, int columns) const {
  if (!progress.has_reports()) return -1;
  if (!terminal_) return next_plain_ < 0 ? now_s : next_plain_;
  if (!shown_) return now_s;
  return line(progress, columns) == drawn_ ? -1 : drawn_at_ + kRedrawInterval;
}

std::string ProgressDisplay::plain_line(const ProgressAggregator& progress) {
  std::string text = line(progress, 0);
  if (text == printed_) return "";  // a log needs no copies of the same line
  printed_ = text;
  return text + "\n";
}

std::string ProgressDisplay::finish(const ProgressAggregator& progress) {
  std::string out = hide();
  if (progress.has_reports()) out += plain_line(progress);
  next_plain_ = -1;
  return out;
}

}  // namespace dpinfer::launcher

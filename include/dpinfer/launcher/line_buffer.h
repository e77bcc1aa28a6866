#pragma once
// Turns a byte stream read in arbitrary chunks into whole lines, so that worker
// output reaches the console one complete, prefixed line at a time.

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

namespace dpinfer::launcher {

class LineBuffer {
 public:
  /// A line longer than this is emitted in pieces of this size, so that a worker
  /// printing without newlines cannot grow the launcher's memory without bound.
  static constexpr size_t kMaxLine = 64 * 1024;

  using Sink = std::function<void(std::string_view line)>;  ///< line without its '\n'

  /// Appends bytes; calls `sink` for every line completed by them. A line ends at
  /// "\n", "\r\n" or a bare "\r": a progress bar (tqdm) redraws itself after a
  /// "\r" and would otherwise show nothing until its last "\n", and then overwrite
  /// the "[rank N] " prefix. A "\r" that ends nothing (tqdm starts each redraw with
  /// one) emits no empty line.
  void feed(std::string_view bytes, const Sink& sink);
  /// Emits what is left as a last line (at EOF).
  void finish(const Sink& sink);
  bool empty() const { return pending_.empty(); }

 private:
  void emit(const Sink& sink);

  std::string pending_;
  /// After a "\r": a "\n" next belongs to it ("\r\n").
  enum { kNoCr, kCrEndedALine, kCrEndedNothing } after_cr_ = kNoCr;
};

/// The last `capacity` lines seen, for the failure summary.
class LineTail {
 public:
  explicit LineTail(size_t capacity) : capacity_(capacity) {}
  void push(std::string_view line);
  const std::deque<std::string>& lines() const { return lines_; }

 private:
  size_t capacity_;
  std::deque<std::string> lines_;
};

}  // namespace dpinfer::launcher

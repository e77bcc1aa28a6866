#pragma once
// The worker's end of the launcher's progress pipe (plan/progress_report.h).

#include <string>

namespace dpinfer::worker {

/// The write end of the launcher's progress pipe, named by DPINFER_PROGRESS_FD. Writing
/// never blocks: a report that finds the pipe full is dropped, and a reader that is
/// gone turns the reports off.
class ProgressPipe {
 public:
  /// The pipe named by DPINFER_PROGRESS_FD; none when it is unset or names no pipe.
  static ProgressPipe from_env();

  bool enabled() const { return fd_ >= 0; }

  /// Writes one whole line (< PIPE_BUF, so all of it or nothing).
  void write(const std::string& line);

 private:
  int fd_ = -1;
};

}  // namespace dpinfer::worker

#pragma once
// The launcher's stdout or stderr, written without ever blocking the supervisor.
//
// A console whose reader stalls (a `| less` that is not scrolling, a full pipe to a
// log shipper) must not freeze supervision: signals must still be forwarded, the
// grace period must still end in SIGKILL, and the first failure must still stop the
// rest. So the supervisor queues console text here, and this writes only what the
// descriptor takes without blocking; the rest waits for POLLOUT.
//
// The descriptor itself stays blocking: fd 1 and 2 usually share their open file
// description with the shell (the terminal), so setting O_NONBLOCK on them would
// leak into it. Instead a write happens only after poll() said POLLOUT, and writes
// at most PIPE_BUF bytes, which a pipe with POLLOUT accepts without blocking
// (pipe(7)). Regular files never block; a terminal drains on its own.

#include <cstddef>
#include <string>
#include <string_view>

namespace dpinfer::launcher {

class ConsoleWriter {
 public:
  /// Past this many queued bytes the supervisor stops reading the workers whose
  /// output goes here (they then block on their own pipes: backpressure).
  static constexpr size_t kHighWater = 1 << 20;

  explicit ConsoleWriter(int fd) : fd_(fd) {}

  /// Queues `text` and writes what the descriptor takes now.
  void write(std::string_view text);
  /// Writes more of the queue, as far as the descriptor takes it now (on POLLOUT).
  void flush_ready();
  /// Writes all of the queue, waiting for the reader: at the end, when no worker is left.
  void drain();

  int fd() const { return fd_; }
  /// The reader is gone (EPIPE) or the descriptor failed: further text is dropped.
  bool closed() const { return closed_; }
  /// Text is waiting for the descriptor: poll it for POLLOUT.
  bool pending() const { return queued() > 0; }
  size_t queued() const { return closed_ ? 0 : queue_.size() - head_; }
  bool full() const { return queued() >= kHighWater; }

 private:
  bool write_some(bool wait);
  bool close();  ///< drops the queue for good; returns false

  int fd_;
  bool closed_ = false;
  std::string queue_;  ///< bytes [head_, size) are still to be written
  size_t head_ = 0;
};

}  // namespace dpinfer::launcher

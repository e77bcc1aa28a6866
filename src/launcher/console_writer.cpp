#include "dpinfer/launcher/console_writer.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace dpinfer::launcher {

void ConsoleWriter::write(std::string_view text) {
  if (closed_ || text.empty()) return;
  queue_.append(text);
  flush_ready();
}

void ConsoleWriter::flush_ready() {
  while (pending() && write_some(false)) {
  }
}

void ConsoleWriter::drain() {
  while (pending() && write_some(true)) {
  }
}

bool ConsoleWriter::close() {
  closed_ = true;
  queue_.clear();
  head_ = 0;
  return false;
}

/// Writes one piece of the queue; false when the descriptor takes nothing now
/// (and `wait` is false) or has failed.
bool ConsoleWriter::write_some(bool wait) {
  pollfd p{fd_, POLLOUT, 0};
  int n = ::poll(&p, 1, wait ? -1 : 0);
  if (n < 0) return errno == EINTR;
  if (n == 0) return false;
  if (p.revents & (POLLERR | POLLNVAL)) return close();  // e.g. the reader of a pipe is gone
  size_t len = std::min<size_t>(queue_.size() - head_, PIPE_BUF);
  ssize_t w = ::write(fd_, queue_.data() + head_, len);
  if (w < 0) {
    if (errno == EINTR || errno == EAGAIN) return errno == EINTR;
    return close();  // EPIPE (SIGPIPE is ignored) or another error: keep supervising without it
  }
  head_ += static_cast<size_t>(w);
  if (head_ == queue_.size()) {
    queue_.clear();
    head_ = 0;
  } else if (head_ >= queue_.size() / 2) {
    queue_.erase(0, head_);  // amortised: each byte is moved at most once more
    head_ = 0;
  }
  return true;
}

}  // namespace dpinfer::launcher

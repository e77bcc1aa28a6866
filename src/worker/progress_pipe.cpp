#include "dpinfer/worker/progress_pipe.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "dpinfer/plan/progress_report.h"
#include "dpinfer/util/log.h"

namespace dpinfer::worker {

ProgressPipe ProgressPipe::from_env() {
  ProgressPipe p;
  const char* value = std::getenv(plan::kProgressFdEnv);
  if (!value || !*value) return p;
  char* end = nullptr;
  long fd = std::strtol(value, &end, 10);
  struct stat st;
  // 0..2 are stdio, never a progress pipe; anything but a pipe is someone else's.
  if (*end != '\0' || fd <= 2 || fd > INT_MAX || ::fstat(static_cast<int>(fd), &st) != 0 || !S_ISFIFO(st.st_mode)) {
    log::debug("{}={} names no pipe; no progress reports", plan::kProgressFdEnv, value);
    return p;
  }
  p.fd_ = static_cast<int>(fd);
  ::fcntl(p.fd_, F_SETFL, ::fcntl(p.fd_, F_GETFL) | O_NONBLOCK);
  ::fcntl(p.fd_, F_SETFD, FD_CLOEXEC);
  return p;
}

void ProgressPipe::write(const std::string& line) {
  if (fd_ < 0) return;
  // A reader that is gone must not kill the worker with SIGPIPE.
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  ssize_t n;
  do n = ::write(fd_, line.data(), line.size());
  while (n < 0 && errno == EINTR);
  int err = n < 0 ? errno : 0;
  if (err == EPIPE) {
    timespec zero{0, 0};
    ::sigtimedwait(&pipe_signal, nullptr, &zero);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (err && err != EAGAIN) {
    log::debug("progress reports stop: {}", std::strerror(err));
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace dpinfer::worker

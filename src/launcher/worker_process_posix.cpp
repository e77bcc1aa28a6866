#include "dpinfer/launcher/worker_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "dpinfer/launcher/progress.h"
#include "dpinfer/util/clock.h"
#include "dpinfer/util/error.h"

namespace dpinfer::launcher {
namespace {

// Fixed descriptor numbers inside the keeper, after it has closed everything else.
constexpr int kKeeperLifeFd = 3;
constexpr int kKeeperReportFd = 4;
constexpr int kKeeperOutFd = 5;
constexpr int kKeeperErrFd = 6;
constexpr int kKeeperProgressFd = 7;  ///< the progress pipe's write end, when the worker gets one
constexpr int kFirstFreeFd = 8;
static_assert(plan::kWorkerProgressFd == kKeeperLifeFd, "the worker's progress fd takes the place of the life pipe");

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

/// Closes every descriptor >= `first`. Used only in freshly forked children.
void close_from(int first) {
  if (::close_range(static_cast<unsigned>(first), ~0U, 0) == 0) return;
  // Kernels before 5.9: walk /proc/self/fd.
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    int dir_fd = ::dirfd(dir);
    std::vector<int> fds;
    while (dirent* e = ::readdir(dir)) {
      int fd = std::atoi(e->d_name);
      if (fd >= first && fd != dir_fd) fds.push_back(fd);
    }
    ::closedir(dir);
    for (int fd : fds) ::close(fd);
  }
}

void write_report(const KeeperReport& r) {
  ssize_t n;
  do n = ::write(kKeeperReportFd, &r, sizeof r);
  while (n < 0 && errno == EINTR);
}

/// Moves the descriptors the keeper needs to 3..7 and closes the rest. `progress`
/// is -1 when the worker gets no progress pipe; fd 7 is then closed too.
void keeper_arrange_fds(int life, int report, int out, int err, int progress) {
  // Lift them above the target range first so that dup2 cannot clobber one of them.
  int moved[5] = {life, report, out, err, progress};
  const int count = progress >= 0 ? 5 : 4;
  for (int i = 0; i < count; ++i) moved[i] = ::fcntl(moved[i], F_DUPFD, 64);
  const int target[5] = {kKeeperLifeFd, kKeeperReportFd, kKeeperOutFd, kKeeperErrFd, kKeeperProgressFd};
  for (int i = 0; i < count; ++i) ::dup2(moved[i], target[i]);  // dup2 clears FD_CLOEXEC
  close_from(progress >= 0 ? kFirstFreeFd : kKeeperProgressFd);
}

/// `envp` without any DPINFER_PROGRESS_FD, plus ours when the worker gets a pipe.
std::vector<std::string> progress_env(const std::vector<std::string>& envp, bool progress_pipe) {
  const std::string key = std::string(plan::kProgressFdEnv) + "=";
  std::vector<std::string> out;
  for (const auto& e : envp)
    if (std::string_view(e).substr(0, key.size()) != key) out.push_back(e);
  if (progress_pipe) out.push_back(key + std::to_string(plan::kWorkerProgressFd));
  return out;
}

[[noreturn]] void exec_worker(const SpawnSpec& spec, bool progress_pipe, int exec_err_fd) {
  // Die with the keeper; if it is already gone, do not start at all.
  pid_t keeper = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != keeper) ::_exit(127);
  ::setpgid(0, 0);

  // Hand the worker a clean signal state: nothing blocked, nothing ignored.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);
  }

  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  ::dup2(kKeeperOutFd, 1);
  ::dup2(kKeeperErrFd, 2);
  // The progress pipe replaces the life pipe at fd 3, which the worker must not hold.
  if (progress_pipe) ::dup2(kKeeperProgressFd, plan::kWorkerProgressFd);
  for (int fd = progress_pipe ? plan::kWorkerProgressFd + 1 : 3; fd < kFirstFreeFd; ++fd) ::close(fd);
  if (devnull >= kFirstFreeFd) ::close(devnull);

  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  ::execve(spec.path.c_str(), argv.data(), envp.data());
  int err = errno;
  ssize_t w = ::write(exec_err_fd, &err, sizeof err);
  (void)w;
  ::_exit(err == ENOENT ? 127 : 126);
}

[[noreturn]] void keeper_main(const SpawnSpec& spec, bool progress_pipe) {
  ::setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C reaches only the launcher
  ::signal(SIGPIPE, SIG_IGN);
  // The launcher's signal mask is inherited: SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGCHLD
  // are blocked, so the keeper ignores what is forwarded to its worker and reads
  // SIGCHLD from a signalfd.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sig_fd = ::signalfd(-1, &chld, SFD_CLOEXEC);

  int exec_pipe[2];
  if (sig_fd < 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    write_report({KeeperReport::kExecFailed, errno, 0});
    ::_exit(1);
  }
  pid_t worker = ::fork();
  if (worker < 0) {
    write_report({KeeperReport::kExecFailed, errno, 0});
    ::_exit(1);
  }
  if (worker == 0) {
    ::close(exec_pipe[0]);
    exec_worker(spec, progress_pipe, exec_pipe[1]);
  }
  ::setpgid(worker, worker);  // also in the child: whichever runs first wins the race
  ::close(exec_pipe[1]);
  ::close(kKeeperOutFd);
  ::close(kKeeperErrFd);
  if (progress_pipe) ::close(kKeeperProgressFd);  // the worker's EOF must not wait for the keeper

  int exec_errno = 0;
  ssize_t n;
  do n = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno))
    write_report({KeeperReport::kExecFailed, exec_errno, 0});
  else
    write_report({KeeperReport::kStarted, worker, 0});

  pollfd fds[2] = {{kKeeperLifeFd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
  for (;;) {
    int r = ::poll(fds, 2, -1);
    if (r < 0 && errno != EINTR) break;
    if (fds[0].revents) {
      char c;
      ssize_t got = ::read(kKeeperLifeFd, &c, 1);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        // The launcher is gone: nothing may outlive it.
        ::kill(-worker, SIGKILL);
        ::kill(worker, SIGKILL);
        int st;
        ::waitpid(worker, &st, 0);
        ::_exit(1);
      }
    }
    if (fds[1].revents) {
      signalfd_siginfo info;
      while (::read(sig_fd, &info, sizeof info) < 0 && errno == EINTR) {
      }
    }
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(worker), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == worker) {
      int64_t died = monotonic_ns();
      // The worker is a zombie now, so its pid (= its group id) cannot be reused
      // before we reap it: killing the group here reaches only its leftovers.
      ::kill(-worker, SIGKILL);
      int st = 0;
      while (::waitpid(worker, &st, 0) < 0 && errno == EINTR) {
      }
      write_report({KeeperReport::kExited, st, died});
      ::_exit(0);
    }
  }
  ::kill(-worker, SIGKILL);
  ::_exit(1);
}

}  // namespace

WorkerProcess WorkerProcess::spawn(const SpawnSpec& spec, int life_fd, bool progress_pipe) {
  SpawnSpec worker_spec = spec;
  worker_spec.envp = progress_env(spec.envp, progress_pipe);
  int out[2], err[2], report[2], progress[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw SystemError("pipe2", errno);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out[0]), ::close(out[1]);
    throw SystemError("pipe2", e);
  }
  if (::pipe2(report, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
    throw SystemError("pipe2", e);
  }
  if (progress_pipe && ::pipe2(progress, O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1]}) ::close(fd);
    throw SystemError("pipe2", e);
  }
  pid_t keeper = ::fork();
  if (keeper < 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1], progress[0], progress[1]})
      if (fd >= 0) ::close(fd);
    throw SystemError("fork", e);
  }
  if (keeper == 0) {
    keeper_arrange_fds(life_fd, report[1], out[1], err[1], progress[1]);
    keeper_main(worker_spec, progress_pipe);
  }
  ::setpgid(keeper, keeper);
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  if (progress[1] >= 0) ::close(progress[1]);

  WorkerProcess p;
  p.keeper_pid_ = keeper;
  p.out_fd_ = out[0];
  p.err_fd_ = err[0];
  p.report_fd_ = report[0];
  p.progress_fd_ = progress[0];
  // The first report comes as soon as exec has succeeded or failed.
  KeeperReport first;
  ssize_t n;
  do n = ::read(p.report_fd_, &first, sizeof first);
  while (n < 0 && errno == EINTR);
  p.first_report_ = n == static_cast<ssize_t>(sizeof first) ? first : KeeperReport{KeeperReport::kExecFailed, EIO, 0};
  if (p.first_report_.kind == KeeperReport::kStarted) {
    p.worker_pid_ = p.first_report_.value;
  }
  for (int fd : {p.out_fd_, p.err_fd_, p.report_fd_, p.progress_fd_})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return p;
}

WorkerProcess::WorkerProcess(WorkerProcess&& o) noexcept { *this = std::move(o); }

WorkerProcess& WorkerProcess::operator=(WorkerProcess&& o) noexcept {
  if (this != &o) {
    close_stdout();
    close_stderr();
    close_report();
    close_progress();
    keeper_pid_ = std::exchange(o.keeper_pid_, 0);
    worker_pid_ = std::exchange(o.worker_pid_, 0);
    out_fd_ = std::exchange(o.out_fd_, -1);
    err_fd_ = std::exchange(o.err_fd_, -1);
    report_fd_ = std::exchange(o.report_fd_, -1);
    progress_fd_ = std::exchange(o.progress_fd_, -1);
    first_report_ = o.first_report_;
  }
  return *this;
}

WorkerProcess::~WorkerProcess() {
  close_stdout();
  close_stderr();
  close_report();
  close_progress();
}

void WorkerProcess::signal_group(int sig) const {
  if (worker_pid_ > 0) ::kill(-worker_pid_, sig);
}

void WorkerProcess::close_stdout() { close_fd(out_fd_); }
void WorkerProcess::close_stderr() { close_fd(err_fd_); }
void WorkerProcess::close_report() { close_fd(report_fd_); }
void WorkerProcess::close_progress() { close_fd(progress_fd_); }

}  // namespace dpinfer::launcher

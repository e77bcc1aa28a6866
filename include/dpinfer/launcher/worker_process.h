#pragma once
// One worker process and the small "keeper" process that guards it.
//
//   launcher ──fork──> keeper ──fork+exec──> worker (its own process group)
//
// The keeper exists so that no worker, nor anything the worker started in its
// process group, outlives the launcher, even after `kill -9` of the launcher:
//  - every keeper holds the read end of one "life" pipe whose only write end is
//    the launcher's; when the launcher dies, however it dies, the kernel closes
//    that end, the keeper sees EOF and SIGKILLs the worker's whole process group.
//    This is race-free: a launcher that died before the keeper looked is seen as
//    EOF on the keeper's first poll.
//  - the worker has PR_SET_PDEATHSIG=SIGKILL on its keeper, checked against
//    getppid() after setting, for the rare case where the keeper itself is killed.
//  - when the worker exits, the keeper SIGKILLs what is left of its process group
//    before reaping it, so background children cannot linger holding a GPU.
// The keeper reports to the launcher over a pipe: the worker's pid once exec
// succeeded (or the exec errno), then its wait status and the CLOCK_MONOTONIC
// time at which it died, which orders simultaneous failures exactly.
//
// On request the worker also gets the write end of a progress pipe at fd 3, and
// DPINFER_PROGRESS_FD=3 (progress.h). Only the worker and what it starts hold
// that end, so the launcher sees EOF once they are gone.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::launcher {

struct SpawnSpec {
  std::string path;               ///< resolved executable (see resolve_command)
  std::vector<std::string> argv;  ///< argv[0] included
  std::vector<std::string> envp;  ///< "KEY=VALUE"
};

/// A message from a keeper. Written whole in one write(2) (< PIPE_BUF, so atomic).
struct KeeperReport {
  enum Kind : int32_t { kStarted = 1, kExecFailed = 2, kExited = 3 };
  int32_t kind = 0;
  int32_t value = 0;     ///< kStarted: worker pid; kExecFailed: errno; kExited: wait status
  int64_t mono_ns = 0;   ///< kExited: CLOCK_MONOTONIC time of death
};

class WorkerProcess {
 public:
  /// Forks the keeper, which forks and execs the worker. `life_fd` is the read end
  /// of the launcher's life pipe. With `progress_pipe`, the worker gets a progress
  /// pipe (see above) whose read end is `progress_fd()`; without, it gets none, and
  /// an inherited DPINFER_PROGRESS_FD is removed from its environment. Returns once
  /// the keeper has reported whether exec succeeded (kStarted/kExecFailed is in
  /// `first_report()`).
  static WorkerProcess spawn(const SpawnSpec& spec, int life_fd, bool progress_pipe = false);

  WorkerProcess() = default;
  WorkerProcess(WorkerProcess&&) noexcept;
  WorkerProcess& operator=(WorkerProcess&&) noexcept;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess();

  pid_t keeper_pid() const { return keeper_pid_; }
  pid_t worker_pid() const { return worker_pid_; }  ///< 0 when exec failed
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  int report_fd() const { return report_fd_; }
  int progress_fd() const { return progress_fd_; }  ///< -1 without a progress pipe
  const KeeperReport& first_report() const { return first_report_; }

  /// Sends `sig` to the worker's process group. No-op when the worker never started.
  void signal_group(int sig) const;

  void close_stdout();
  void close_stderr();
  void close_report();
  void close_progress();

 private:
  pid_t keeper_pid_ = 0;
  pid_t worker_pid_ = 0;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int report_fd_ = -1;
  int progress_fd_ = -1;
  KeeperReport first_report_;
};

}  // namespace dpinfer::launcher

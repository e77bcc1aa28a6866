#include "dpinfer/launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "dpinfer/launcher/console_writer.h"
#include "dpinfer/launcher/line_buffer.h"
#include "dpinfer/launcher/progress.h"
#include "dpinfer/util/clock.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/signal_names.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::launcher {
namespace {

constexpr int64_t kNsPerSecond = 1000000000;
/// After a worker has died, how long its pipes may stay open (held by a descendant
/// that left its process group) before the launcher stops reading them.
constexpr int64_t kDrainAfterExitNs = kNsPerSecond;

double seconds_of(int64_t mono_ns) { return static_cast<double>(mono_ns) / kNsPerSecond; }

/// A terminal that understands "\r" and "\x1b[K" is on stderr.
bool stderr_is_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && !(term && std::string_view(term) == "dumb");
}

int stderr_columns() {
  winsize ws{};
  return ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
}

sigset_t launcher_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD}) sigaddset(&set, s);
  return set;
}

/// Writes all of `data` to a log file; false on an error.
bool write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

/// One output stream (stdout or stderr) of one worker.
struct Stream {
  ConsoleWriter* console = nullptr;  ///< the launcher's stdout or stderr, or none when not shown
  int log_fd = -1;      ///< per-rank file, or -1
  LineBuffer lines;
  LineTail tail{kSummaryTailLines};
  bool open = true;
};

struct LiveRank {
  const RankSpec* spec = nullptr;
  WorkerProcess proc;
  std::string prefix;  ///< "[rank N] "
  Stream out, err;
  LineBuffer progress_lines;
  bool progress_open = false;  ///< its progress pipe is being read
  bool ended = false;          ///< its exit (or its keeper's) is known
  bool keeper_reaped = false;
  bool signaled = false;       ///< we sent it SIGTERM or SIGKILL
  int64_t started_ns = 0;
  int64_t died_ns = 0;
  Termination termination;
  std::string exec_error;

  bool done() const { return ended && keeper_reaped && !out.open && !err.open && !progress_open; }
};

class Attempt {
 public:
  Attempt(const std::vector<RankSpec>& specs, const OutputOptions& output, double grace_s, int attempt)
      : output_(output), grace_ns_(static_cast<int64_t>(grace_s * kNsPerSecond)) {
    sigset_t set = launcher_signals();
    sig_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd_ < 0) throw SystemError("signalfd", errno);
    if (::pipe2(life_, O_CLOEXEC) != 0) throw SystemError("pipe2", errno);
    std::string log_dir;
    if (!output.run_log_dir.empty()) {
      log_dir = output.run_log_dir + "/attempt_" + std::to_string(attempt);
      std::error_code ec;
      std::filesystem::create_directories(log_dir, ec);
      if (ec) throw Error("--log-dir: cannot create '" + log_dir + "': " + ec.message());
      log::info("worker logs: {}", log_dir);
    }
    if (!output.quiet && output.progress_interval_s > 0) {
      progress_.emplace(static_cast<int>(specs.size()));
      terminal_ = stderr_is_terminal();
      display_.emplace(terminal_, output.progress_interval_s);
    }
    ranks_.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      LiveRank& r = ranks_[i];
      r.spec = &specs[i];
      r.prefix = "[rank " + std::to_string(specs[i].rank) + "] ";
      const int local = specs[i].local_rank;
      r.out.console = shows_on_console(local, StreamSpec::kStdout) ? &out_console_ : nullptr;
      r.err.console = shows_on_console(local, StreamSpec::kStderr) ? &err_console_ : nullptr;
      if (!log_dir.empty()) {
        // torchrun's layout: attempt_N/LOCAL_RANK/{stdout,stderr}.log.
        const std::string dir = log_dir + "/" + std::to_string(local);
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
          throw Error("--log-dir: cannot create " + quote(dir) + ": " + std::strerror(errno));
        r.out.log_fd = open_log(dir + "/stdout.log");
        r.err.log_fd = open_log(dir + "/stderr.log");
      }
    }
  }

  ~Attempt() {
    for (LiveRank& r : ranks_) {
      if (r.out.log_fd >= 0) ::close(r.out.log_fd);
      if (r.err.log_fd >= 0) ::close(r.err.log_fd);
    }
    if (life_[0] >= 0) ::close(life_[0]);
    if (life_[1] >= 0) ::close(life_[1]);
    if (sig_fd_ >= 0) ::close(sig_fd_);
  }

  AttemptResult run() {
    // The launcher's own lines join the worker output's queue, in order, so that
    // a stalled stderr cannot block the supervision in a log call either.
    log::set_redirect([this](const std::string& line) {
      hide_progress();
      err_console_.write(line);
    });
    struct Restore {
      ~Restore() { log::set_redirect(nullptr); }
    } restore;
    start_all();
    while (!all_done()) poll_once();
    if (display_) write_stderr(display_->finish(*progress_));
    // No worker is left: now it is fine to wait for a slow reader.
    out_console_.drain();
    err_console_.drain();
    return result();
  }

 private:
  /// Whether `stream` (StreamSpec::kStdout or kStderr) of `local_rank` reaches the
  /// console: as under torchrun, unless --redirects sends it to the files only
  /// (and --tee does not keep it), or --local-ranks-filter leaves the rank out.
  bool shows_on_console(int local_rank, int stream) const {
    if (output_.quiet) return false;
    if ((output_.redirects.streams(local_rank) & stream) && !(output_.tee.streams(local_rank) & stream)) return false;
    const auto& f = output_.local_ranks_filter;
    return f.empty() || std::find(f.begin(), f.end(), local_rank) != f.end();
  }

  static int open_log(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("--log-dir: cannot write " + quote(path) + ": " + std::strerror(errno));
    return fd;
  }

  void start_all() {
    for (LiveRank& r : ranks_) {
      r.started_ns = monotonic_ns();
      r.proc = WorkerProcess::spawn(r.spec->spawn, life_[0], progress_.has_value());
      r.progress_open = r.proc.progress_fd() >= 0;
      const KeeperReport& first = r.proc.first_report();
      if (first.kind == KeeperReport::kExecFailed) {
        const std::string& path = r.spec->spawn.path;
        // ENOENT for a file that exists: the kernel did not find the script's interpreter.
        r.exec_error = "cannot execute '" + path + "': " +
                       (first.value == ENOENT && ::access(path.c_str(), F_OK) == 0
                            ? std::string("its interpreter (the #! line) was not found")
                            : std::string(std::strerror(first.value)));
      }
      // A signal that arrived while we were starting workers is handled once all
      // of them exist, so that every worker receives it.
    }
    log::debug("started {} worker(s)", ranks_.size());
  }

  bool all_done() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const LiveRank& r) { return r.done(); });
  }

  void poll_once() {
    std::vector<pollfd> fds;
    // Which rank and which stream (0 out, 1 err, 2 report, 3 progress); with no rank, the
    // signalfd (-1) or a console fd that is writable again (1, 2).
    std::vector<std::pair<LiveRank*, int>> owners;
    fds.push_back({sig_fd_, POLLIN, 0});
    owners.push_back({nullptr, -1});
    int64_t now = monotonic_ns();
    // While a console is backed up, a dead worker's pipe still holds its last lines:
    // keep it until they are read.
    const bool backed_up = out_console_.full() || err_console_.full();
    for (LiveRank& r : ranks_) {
      if (r.ended && (r.out.open || r.err.open || r.progress_open) && now - r.died_ns > kDrainAfterExitNs &&
          !backed_up) {
        close_stream(r, r.out, 0);  // a descendant outside its group still holds the pipe
        close_stream(r, r.err, 1);
        close_progress(r);
      }
    }
    // Closing the last pipes above may have ended the attempt: poll() would then wait for nothing.
    if (all_done()) return;
    for (ConsoleWriter* c : {&out_console_, &err_console_}) {
      if (c->pending()) fds.push_back({c->fd(), POLLOUT, 0}), owners.push_back({nullptr, c->fd()});
    }
    for (LiveRank& r : ranks_) {
      // A stream whose console is backed up is not read: its worker then blocks on its
      // own pipe (backpressure), while signals and deadlines are still served.
      if (r.out.open && !blocked(r.out)) fds.push_back({r.proc.stdout_fd(), POLLIN, 0}), owners.push_back({&r, 0});
      if (r.err.open && !blocked(r.err)) fds.push_back({r.proc.stderr_fd(), POLLIN, 0}), owners.push_back({&r, 1});
      if (r.proc.report_fd() >= 0) fds.push_back({r.proc.report_fd(), POLLIN, 0}), owners.push_back({&r, 2});
      if (r.progress_open) fds.push_back({r.proc.progress_fd(), POLLIN, 0}), owners.push_back({&r, 3});
    }
    int timeout_ms = -1;
    auto consider = [&](int64_t deadline) {
      int64_t ms = std::max<int64_t>(0, (deadline - now + 999999) / 1000000);
      if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(std::min<int64_t>(ms, 1 << 30));
    };
    if (kill_deadline_ns_) consider(kill_deadline_ns_);
    for (const LiveRank& r : ranks_)
      if (r.ended && (r.out.open || r.err.open || r.progress_open)) consider(r.died_ns + kDrainAfterExitNs + 1);
    if (display_) {
      double due = display_->next_due(*progress_, seconds_of(now), columns_);
      if (due >= 0) consider(static_cast<int64_t>(due * kNsPerSecond));
    }
    // A keeper that ended without reporting is noticed through SIGCHLD, which the signalfd sees.

    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) throw SystemError("poll", errno);
    for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto [rank, which] = owners[i];
      if (!rank && which == STDOUT_FILENO) {
        out_console_.flush_ready();
      } else if (!rank && which == STDERR_FILENO) {
        err_console_.flush_ready();
      } else if (!rank) {
        handle_signals();
      } else if (which == 2) {
        read_reports(*rank);
      } else if (which == 3) {
        read_progress(*rank);
      } else {
        read_stream(*rank, which == 0 ? rank->out : rank->err, which);
      }
    }
    if (kill_deadline_ns_ && monotonic_ns() >= kill_deadline_ns_) {
      kill_deadline_ns_ = 0;
      size_t live = signal_live(SIGKILL);
      hide_progress();
      if (live) log::warn("grace period over; sent SIGKILL to {} worker(s)", live);
    }
    if (display_) {
      if (terminal_) columns_ = stderr_columns();  // the window may have been resized
      write_stderr(display_->tick(*progress_, seconds_of(monotonic_ns()), columns_));
    }
  }

  void read_progress(LiveRank& r) {
    char buf[4096];
    for (int rounds = 0; rounds < 16; ++rounds) {
      ssize_t n = ::read(r.proc.progress_fd(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        close_progress(r);
        return;
      }
      r.progress_lines.feed(std::string_view(buf, static_cast<size_t>(n)),
                            [&](std::string_view line) { take_progress(r, line); });
    }
  }

  void take_progress(const LiveRank& r, std::string_view line) {
    auto report = plan::parse_progress_report(line);
    if (!report) return;  // not ours to judge: the pipe is the worker's, and progress is best effort
    report->rank = r.spec->rank;  // the launcher knows who wrote it
    progress_->add(*report, seconds_of(monotonic_ns()));
  }

  void close_progress(LiveRank& r) {
    if (!r.progress_open) return;
    r.progress_lines.finish([&](std::string_view line) { take_progress(r, line); });
    r.progress_open = false;
    r.proc.close_progress();
  }

  /// Erases the status line before anything else reaches the console.
  void hide_progress() {
    if (display_) write_stderr(display_->hide());
  }

  void write_stderr(const std::string& text) { err_console_.write(text); }

  static bool blocked(const Stream& s) { return s.console && s.console->full(); }

  void read_stream(LiveRank& r, Stream& s, int which) {
    char buf[65536];
    for (int rounds = 0; rounds < 16; ++rounds) {  // bounded, so one noisy worker cannot starve the rest
      ssize_t n = ::read(which == 0 ? r.proc.stdout_fd() : r.proc.stderr_fd(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        close_stream(r, s, which);
        return;
      }
      std::string_view bytes(buf, static_cast<size_t>(n));
      if (s.log_fd >= 0 && !write_fully(s.log_fd, bytes)) {
        int e = errno;
        hide_progress();
        log::warn("cannot write the log of rank {}: {}; its file stops here", r.spec->rank, std::strerror(e));
        ::close(s.log_fd);
        s.log_fd = -1;
      }
      std::string console;
      s.lines.feed(bytes, [&](std::string_view line) { emit(r, s, line, console); });
      flush_console(s, console);
    }
  }

  void emit(LiveRank& r, Stream& s, std::string_view line, std::string& console) {
    s.tail.push(line);
    if (!s.console) return;
    console.append(r.prefix).append(line).push_back('\n');
  }

  void flush_console(Stream& s, const std::string& console) {
    if (console.empty() || !s.console) return;
    hide_progress();
    ConsoleWriter* c = s.console;
    c->write(console);
    if (c->closed()) {
      // The console's reader is gone (e.g. `| head`). Keep supervising; log files go on.
      for (LiveRank& r : ranks_) {
        if (r.out.console == c) r.out.console = nullptr;
        if (r.err.console == c) r.err.console = nullptr;
      }
    }
  }

  void close_stream(LiveRank& r, Stream& s, int which) {
    if (!s.open) return;
    std::string console;
    s.lines.finish([&](std::string_view line) { emit(r, s, line, console); });
    flush_console(s, console);
    s.open = false;
    if (which == 0) r.proc.close_stdout();
    else r.proc.close_stderr();
  }

  void read_reports(LiveRank& r) {
    KeeperReport report;
    for (;;) {
      ssize_t n = ::read(r.proc.report_fd(), &report, sizeof report);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n != static_cast<ssize_t>(sizeof report)) {
        r.proc.close_report();
        return;
      }
      if (report.kind == KeeperReport::kExited && !r.ended) {
        on_rank_ended(r, Termination::from_wait_status(report.value), report.mono_ns);
      }
    }
  }

  void handle_signals() {
    signalfd_siginfo info;
    while (::read(sig_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap_children();
      } else {
        on_launcher_signal(sig);
      }
    }
  }

  void reap_children() {
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (LiveRank& r : ranks_) {
        if (r.proc.keeper_pid() != pid) continue;
        r.keeper_reaped = true;
        // A keeper reports before it exits, but read what is left in its pipe first.
        if (r.proc.report_fd() >= 0) read_reports(r);
        if (!r.ended) {
          // The keeper died without a report (it was killed): the worker got
          // SIGKILL through PR_SET_PDEATHSIG. Report the keeper's own end.
          on_rank_ended(r, Termination::from_wait_status(status), monotonic_ns());
        }
      }
      // Any other pid is a descendant reparented to us (we are a subreaper): reaped, nothing more.
    }
  }

  void on_rank_ended(LiveRank& r, Termination t, int64_t died_ns) {
    r.ended = true;
    r.termination = t;
    r.died_ns = died_ns;
    if (t.ok() || interrupted_by_) return;
    failed_before_signal_ = true;
    // The first failure starts the teardown. Later failures may still have died
    // earlier (their reports raced); result() picks the earliest death.
    if (teardown_started_ns_) return;
    teardown_started_ns_ = monotonic_ns();
    kill_deadline_ns_ = teardown_started_ns_ + grace_ns_;
    size_t live = signal_live(SIGTERM);
    hide_progress();
    if (live)
      log::error("rank {} failed ({}); stopping {} other worker(s): SIGTERM now, SIGKILL in {}s", r.spec->rank,
                 r.exec_error.empty() ? t.describe() : r.exec_error, live,
                 grace_ns_ / static_cast<double>(kNsPerSecond));
  }

  void on_launcher_signal(int sig) {
    if (interrupted_by_ && sig == SIGINT) {
      size_t live = signal_live(SIGKILL);
      hide_progress();
      log::warn("{}: killed {} worker(s) at once",
                interrupted_by_ == SIGINT ? "second SIGINT" : "SIGINT after " + signal_name(interrupted_by_), live);
      kill_deadline_ns_ = 0;
      return;
    }
    if (!interrupted_by_) {
      interrupted_by_ = sig;
      // A failure's teardown may be under way already: its root cause stays the root
      // cause (result()), and its SIGKILL deadline is not pushed later.
      if (!teardown_started_ns_) teardown_started_ns_ = monotonic_ns();
      if (!kill_deadline_ns_) kill_deadline_ns_ = monotonic_ns() + grace_ns_;
    }
    size_t live = signal_live(sig);
    hide_progress();
    log::warn("received {}; forwarded it to {} worker(s); SIGKILL in {:.3g}s{}", signal_name(sig), live,
              std::max<int64_t>(0, kill_deadline_ns_ - monotonic_ns()) / static_cast<double>(kNsPerSecond),
              sig == SIGINT ? " (press Ctrl-C again to kill now)" : "");
  }

  /// Sends `sig` to every worker still running; returns how many.
  size_t signal_live(int sig) {
    size_t n = 0;
    for (LiveRank& r : ranks_) {
      if (r.ended || r.proc.worker_pid() <= 0) continue;
      r.proc.signal_group(sig);
      r.signaled = true;
      ++n;
    }
    return n;
  }

  AttemptResult result() const {
    AttemptResult res;
    res.interrupted_by = interrupted_by_;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const LiveRank& r = ranks_[i];
      RankOutcome o;
      o.local_rank = r.spec->local_rank;
      o.rank = r.spec->rank;
      o.pid = r.proc.worker_pid();
      o.termination = r.termination;
      o.signaled_by_launcher = r.signaled;
      o.exec_error = r.exec_error;
      o.seconds = (r.died_ns - r.started_ns) / static_cast<double>(kNsPerSecond);
      o.stderr_tail.assign(r.err.tail.lines().begin(), r.err.tail.lines().end());
      o.stdout_tail.assign(r.out.tail.lines().begin(), r.out.tail.lines().end());
      res.ranks.push_back(std::move(o));
      bool candidate = !r.termination.ok() && (!interrupted_by_ || failed_before_signal_) &&
                       (!teardown_started_ns_ || r.died_ns <= teardown_started_ns_ || !r.signaled);
      if (candidate && (!res.root_cause || r.died_ns < ranks_[*res.root_cause].died_ns)) res.root_cause = i;
    }
    return res;
  }

  const OutputOptions& output_;
  int64_t grace_ns_;
  // Before ranks_, whose streams point at them.
  ConsoleWriter out_console_{STDOUT_FILENO};
  ConsoleWriter err_console_{STDERR_FILENO};
  int sig_fd_ = -1;
  int life_[2] = {-1, -1};
  std::vector<LiveRank> ranks_;
  int interrupted_by_ = 0;
  bool failed_before_signal_ = false;  ///< a worker failed before the launcher got a signal
  int64_t teardown_started_ns_ = 0;
  int64_t kill_deadline_ns_ = 0;
  std::optional<ProgressAggregator> progress_;  ///< with display_, unless the line is off
  std::optional<ProgressDisplay> display_;
  bool terminal_ = false;     ///< the progress line is a status line on a terminal
  int columns_ = 0;           ///< of that terminal, 0 when unknown
};

}  // namespace

void prepare_launcher_process() {
  sigset_t set = launcher_signals();
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) throw SystemError("sigprocmask", errno);
  ::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

AttemptResult run_attempt(const std::vector<RankSpec>& ranks, const OutputOptions& output,
                          double grace_period_s, int attempt) {
  Attempt a(ranks, output, grace_period_s, attempt);
  return a.run();
}

}  // namespace dpinfer::launcher

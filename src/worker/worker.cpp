#include "dpinfer/worker/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <c10/util/Logging.h>
#include <torch/cuda.h>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/io/png_writer.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/launcher/progress.h"
#include "dpinfer/launcher/worker_env.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/version.h"
#include "dpinfer/worker/default_model.h"
#include "dpinfer/worker/image_metadata.h"
#include "dpinfer/worker/items.h"
#include "dpinfer/worker/manifest_names.h"
#include "dpinfer/worker/rank_info.h"
#include "dpinfer/worker/sharding.h"
#include "dpinfer/worker/worker_group.h"

namespace dpinfer::worker {
namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_stop_signal = 0;
/// CLOCK_MONOTONIC nanoseconds of the first stop signal (lock-free, so the handler may set it).
std::atomic<int64_t> g_stop_signal_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);

int64_t monotonic_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) {
    g_stop_signal_ns = monotonic_now_ns();
    g_stop_signal = sig;
  }
}

/// SIGTERM (SLURM preemption, the launcher's teardown), SIGINT, SIGUSR1/2
/// (SLURM's --signal) stop the worker after the current batch, or abandon that
/// batch once --stop-timeout has passed (TextToImage's cancel check).
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) ::sigaction(s, &sa, nullptr);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- SLURM job: the job's identity, and --requeue-on-signal -------------------

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

/// The SLURM job this worker runs in, from SLURM_JOB_ID and friends; empty outside SLURM.
struct SlurmJob {
  std::string job_id, array_job_id, array_task_id, restart_count;

  static SlurmJob from_env() {
    return {env_or_empty("SLURM_JOB_ID"), env_or_empty("SLURM_ARRAY_JOB_ID"), env_or_empty("SLURM_ARRAY_TASK_ID"),
            env_or_empty("SLURM_RESTART_COUNT")};
  }
  bool in_job() const { return !job_id.empty(); }
  bool array_task() const { return !array_job_id.empty() && !array_task_id.empty(); }
  /// What `scontrol requeue` takes: ARRAYJOB_TASK for an array task, else the job id.
  std::string requeue_id() const { return array_task() ? array_job_id + "_" + array_task_id : job_id; }
  /// "SLURM job 123 (array task 120_2), restart 1"
  std::string describe() const {
    std::string s = "SLURM job " + job_id;
    if (array_task()) s += " (array task " + array_job_id + "_" + array_task_id + ")";
    if (!restart_count.empty()) s += ", restart " + restart_count;
    return s;
  }
  nlohmann::json to_json() const {
    auto number_or_string = [](const std::string& v) -> nlohmann::json {
      if (v.empty()) return nullptr;
      if (v.find_first_not_of("0123456789") == std::string::npos && v.size() < 19) return std::stoll(v);
      return v;
    };
    nlohmann::json restarts = number_or_string(restart_count);
    return {{"job_id", number_or_string(job_id)}, {"array_job_id", number_or_string(array_job_id)},
            {"array_task_id", number_or_string(array_task_id)}, {"restart_count", restarts.is_null() ? nlohmann::json(0) : restarts}};
  }
};

struct CommandResult {
  std::string error;        ///< why it could not run; empty when it ran
  bool timed_out = false;   ///< killed after the timeout
  int exit_code = -1;       ///< when it exited
  int term_signal = 0;      ///< when a signal ended it
  std::string output;       ///< stdout and stderr together
  bool ok() const { return error.empty() && !timed_out && exit_code == 0; }
};

/// Runs `argv` (looked up in PATH) with stdin from /dev/null, collecting its output;
/// kills it after `timeout`.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    r.error = std::strerror(rc);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      r.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (n == 0) continue;  // the deadline check above kills it
    ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (r.output.size() < 64 * 1024) r.output.append(buf, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) r.term_signal = WTERMSIG(st);
  return r;
}

/// `output` on one line, without trailing blanks.
std::string squeeze(std::string output) {
  for (char& c : output)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  while (!output.empty() && output.back() == ' ') output.pop_back();
  return output;
}

/// --requeue-on-signal: after a stop by SIGTERM/SIGUSR1/SIGUSR2, rank 0 asks SLURM
/// to requeue this job (or job array task), once. Never changes the exit status.
void requeue_slurm_job(const SlurmJob& job, int rank, int sig) {
  static bool done = false;
  if (done || rank != 0) return;
  if (sig != SIGTERM && sig != SIGUSR1 && sig != SIGUSR2) return;
  done = true;
  const char* name = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2";
  if (!job.in_job()) {
    log::warn("--requeue-on-signal: stopped by {} but not inside a SLURM job (SLURM_JOB_ID is unset); nothing to "
              "requeue",
              name);
    return;
  }
  const std::string id = job.requeue_id();
  log::info("--requeue-on-signal: stopped by {}; requeueing SLURM job {} (scontrol requeue {})", name, id, id);
  // Well inside SLURM's KillWait (30 s by default), which runs from the same signal.
  CommandResult r = run_command({"scontrol", "requeue", id}, std::chrono::seconds(15));
  std::string out = squeeze(r.output);
  if (r.ok()) {
    log::info("SLURM job {} requeued: it runs again (SLURM_RESTART_COUNT={}) and skips the items done so far{}", id,
              job.restart_count.empty() ? 1 : std::atoll(job.restart_count.c_str()) + 1,
              out.empty() ? "" : " (scontrol: " + out + ")");
    return;
  }
  std::string why = !r.error.empty() ? "cannot run scontrol: " + r.error
                    : r.timed_out    ? "scontrol did not answer within 15 s"
                    : r.term_signal  ? "scontrol was killed by signal " + std::to_string(r.term_signal)
                                     : "scontrol exited with status " + std::to_string(r.exit_code);
  log::error("--requeue-on-signal: could not requeue SLURM job {}: {}{}; resubmit the job to resume it", id, why,
             out.empty() ? "" : ": " + out);
}

std::string resolve_device(const std::string& requested, const RankInfo& rank) {
  const int visible = static_cast<int>(torch::cuda::device_count());
  if (requested == "cpu") return "cpu";
  if (requested == "auto" && visible == 0) return "cpu";
  if (visible == 0)
    throw UsageError("--device cuda: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver, or use "
                     "--device cpu)");
  // `srun --gpus-per-task=1`: SLURM shows each task its own GPU, whatever its local rank.
  if (visible == 1 && rank.source == "slurm") return "cuda:0";
  if (rank.local_rank >= visible)
    throw UsageError("rank " + std::to_string(rank.rank) + " needs cuda:" + std::to_string(rank.local_rank) + " but " +
                     std::to_string(visible) + " device(s) are visible (start at most " + std::to_string(visible) +
                     " processes per node)");
  return "cuda:" + std::to_string(rank.local_rank);
}

std::string resolve_dtype(const std::string& requested, const std::string& device) {
  if (requested != "auto") return requested;
  return device == "cpu" ? "fp32" : "fp16";
}

/// The write end of the launcher's progress pipe (launcher/progress.h), named by
/// DPINFER_PROGRESS_FD. Writing never blocks: a report that finds the pipe full is
/// dropped, and a reader that is gone turns the reports off.
class ProgressPipe {
 public:
  /// The pipe named by DPINFER_PROGRESS_FD; none when it is unset or names no pipe.
  static ProgressPipe from_env() {
    ProgressPipe p;
    const char* value = std::getenv(launcher::kProgressFdEnv);
    if (!value || !*value) return p;
    char* end = nullptr;
    long fd = std::strtol(value, &end, 10);
    struct stat st;
    // 0..2 are stdio, never a progress pipe; anything but a pipe is someone else's.
    if (*end != '\0' || fd <= 2 || fd > INT_MAX || ::fstat(static_cast<int>(fd), &st) != 0 || !S_ISFIFO(st.st_mode)) {
      log::debug("{}={} names no pipe; no progress reports", launcher::kProgressFdEnv, value);
      return p;
    }
    p.fd_ = static_cast<int>(fd);
    ::fcntl(p.fd_, F_SETFL, ::fcntl(p.fd_, F_GETFL) | O_NONBLOCK);
    ::fcntl(p.fd_, F_SETFD, FD_CLOEXEC);
    return p;
  }

  bool enabled() const { return fd_ >= 0; }

  /// Writes one whole line (< PIPE_BUF, so all of it or nothing).
  void write(const std::string& line) {
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

 private:
  int fd_ = -1;
};

/// How often a rank tells the launcher how far it is, at most.
constexpr auto kProgressInterval = std::chrono::milliseconds(250);

struct Stats {
  int64_t generated = 0, skipped = 0, failed = 0;
  double busy_s = 0;
  nlohmann::json to_json() const {
    return {{"generated", generated}, {"skipped", skipped}, {"failed", failed}, {"seconds", busy_s}};
  }
};

class GenerateRun {
 public:
  GenerateRun(const GenerateOptions& o, const PipelineFactory& factory) : o_(o), factory_(factory) {}

  int run() {
    rank_ = rank_info_from_env(launcher::current_environment());
    if (rank_.rank == 0 && slurm_.in_job()) log::info("{}", slurm_.describe());
    // With peers on other nodes, node 0's launcher learns the run's totals only
    // through rank 0, which reads them from the store.
    multi_node_ = rank_.world_size > rank_.local_world_size;
    if (o_.prompts == "-" && rank_.world_size > 1)
      throw UsageError("prompts from stdin ('-') work with one rank only: every rank reads the same item list, and "
                       "ranks do not share one stdin; write the prompts to a file and pass its path");
    auto specs = io::read_prompt_file(o_.prompts, o_.jsonl_stdin);
    if (specs.empty()) throw UsageError("'" + o_.prompts + "' holds no prompt (blank lines are skipped)");
    // --shard, else a SLURM job array task's shard (sharding.h), else the whole file.
    const OuterShardChoice shard_choice = choose_outer_shard(o_.shard, launcher::current_environment());
    const OuterShard shard = shard_choice.shard;
    if (shard_choice.sharded && rank_.rank == 0)
      log::info("outer shard {}/{} from {}", shard.index, shard.count, shard_choice.source);
    mode_ = parse_shard_mode(o_.shard_mode);

    {
      std::error_code ec;
      fs::create_directories(o_.out, ec);
      if (ec || !fs::is_directory(o_.out))
        throw UsageError("--out '" + o_.out + "': cannot make it a directory (" +
                         (ec ? ec.message() : std::string("a file of that name exists")) + "); give a directory");
    }
    if (rank_.rank == 0) {
      size_t removed = io::remove_stale_temporaries(o_.out);
      if (removed) log::info("removed {} stale temporary file(s) from an interrupted run", removed);
    }
    // Join before anything rank-specific can fail, so that such a failure reaches
    // the other ranks through the abort flag instead of leaving them waiting.
    WorkerGroup::Options go;
    go.timeout = std::chrono::seconds(o_.rendezvous_timeout_s);
    go.interrupted = [] { return g_stop_signal != 0; };
    if (rank_.world_size > 1)
      log::debug("rank {}/{} ({}): rendezvous at {}:{} (from {})", rank_.rank, rank_.world_size, rank_.source,
                 rank_.master_addr, rank_.master_port, rank_.master_from);
    group_ = WorkerGroup::join(rank_, go);
    const std::string device = resolve_device(o_.device, rank_);
    if (device != "cpu") group_->join_nccl(std::stoi(device.substr(5)));  // "cuda:N"
    std::string model = o_.model;
    if (model.empty()) {
      model = default_model_dir();
      if (rank_.rank == 0) log::info("no --model: using the default model {}", model);
    }
    PipelineRequest req{model, o_.variant, o_.scheduler, resolve_dtype(o_.dtype, device), device, o_.clip_skip,
                        o_.guidance_rescale};
    log::debug("rank {}/{} ({}) on {}", rank_.rank, rank_.world_size, rank_.source, device);

    auto start = std::chrono::steady_clock::now();
    pipe_ = factory_(req);
    pipe_->set_cancel_check([timeout_ns = int64_t{o_.stop_timeout_s} * 1000000000] {
      return g_stop_signal != 0 && monotonic_now_ns() - g_stop_signal_ns >= timeout_ns;
    });
    const pipeline::PipelineInfo& info = pipe_->info();
    log::debug("pipeline loaded in {:.2f}s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

    ItemDefaults d;
    d.negative_prompt = o_.negative_prompt;
    d.seed = o_.seed;
    d.steps = o_.steps.value_or(info.default_steps);
    d.guidance_scale = o_.guidance_scale.value_or(info.default_guidance_scale);
    d.width = o_.width.value_or(info.default_width);
    d.height = o_.height.value_or(info.default_height);
    defaults_ = d;
    std::vector<Item> all = expand_items(specs, d);
    for (const Item& it : all) {
      if (it.width % 8 || it.height % 8)
        throw UsageError("'" + o_.prompts + "' line " + std::to_string(it.line) + ": size " + std::to_string(it.width) +
                         "x" + std::to_string(it.height) + " is not a multiple of 8");
    }
    auto [shard_begin, shard_end] = contiguous_range(static_cast<int64_t>(all.size()), shard.count, shard.index);
    items_.assign(all.begin() + shard_begin, all.begin() + shard_end);
    total_items_ = static_cast<int64_t>(all.size());

    const std::string manifest_name =
        manifest_file_name(shard_choice.sharded ? std::optional<OuterShard>(shard) : std::nullopt, rank_.rank);
    manifest_ = std::make_unique<io::ManifestWriter>((fs::path(o_.out) / manifest_name).string());
    if (rank_.rank == 0) write_run_json(info, shard, nullptr);

    group_->barrier("model-loaded");
    group_->device_barrier();
    if (rank_.rank == 0)
      log::info("{} item(s){} on {} rank(s), {} sharding, batch size {}", items_.size(),
                shard_choice.sharded ? " in shard " + std::to_string(shard.index) + "/" + std::to_string(shard.count)
                                     : "",
                rank_.world_size, to_string(mode_), o_.batch_size);

    bool stopped = mode_ == ShardMode::kDynamic ? run_dynamic() : run_static();
    if (auto why = group_->abort_reason()) throw Error(*why);
    stopped = stopped || g_stop_signal != 0;
    int status;
    try {
      status = stopped ? finish_stopped() : finish(info, shard);
    } catch (const WorkerGroup::Interrupted&) {
      status = finish_stopped();  // a signal came while waiting for the peers
      stopped = true;
    }
    report_progress(true);
    // Stopped by a signal, the peers are stopping too: don't wait long for them.
    group_->leave(stopped ? std::chrono::seconds(5) : std::chrono::seconds(o_.rendezvous_timeout_s));
    return status;
  }

  void abort(const std::string& why) {
    if (group_) group_->abort(why);
  }

  /// --requeue-on-signal, once the run is over: `status` 128+sig means a signal stopped it.
  void requeue_if_stopped(int status) const {
    int sig = g_stop_signal;
    if (o_.requeue_on_signal && sig != 0 && status == 128 + sig) requeue_slurm_job(slurm_, rank_.rank, sig);
  }

  /// Tells the launcher how far this rank is (launcher/progress.h): at most every
  /// kProgressInterval unless `force`, and only once the items are known.
  void report_progress(bool force) noexcept {
    if (!progress_.enabled() || !items_known_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_report_ < kProgressInterval) return;
    last_report_ = now;
    try {
      launcher::ProgressReport r;
      r.rank = rank_.rank;
      r.world = rank_.world_size;
      r.counts = {stats_.generated, stats_.skipped, stats_.failed};
      r.todo = todo_;
      r.total = static_cast<int64_t>(items_.size());
      if (group_totals_) {
        r.group = group_totals_;
      } else if (multi_node_ && rank_.rank == 0 && group_) {
        r.group = launcher::ProgressCounts{group_->add("done-items", 0), group_->add("skipped-items", 0),
                                           group_->add("failed-items", 0)};
      }
      progress_.write(launcher::format_progress_report(r) + "\n");
    } catch (const std::exception& e) {
      log::debug("rank {}: no progress report: {}", rank_.rank, first_line(e.what()));
    }
  }

 private:
  /// Static modes: this rank's positions, in order. Returns true when stopped by a signal.
  bool run_static() {
    auto positions = static_assignment(static_cast<int64_t>(items_.size()), rank_.world_size, rank_.rank, mode_);
    std::vector<const Item*> todo;
    for (int64_t p : positions) {
      const Item& it = items_[p];
      if (!o_.overwrite && already_made(it)) {
        ++stats_.skipped;
        continue;
      }
      todo.push_back(&it);
    }
    todo_ = static_cast<int64_t>(positions.size());
    items_known_ = true;
    if (multi_node_ && stats_.skipped) group_->add("skipped-items", stats_.skipped);
    report_progress(true);
    if (stats_.skipped) log::info("rank {}: skipped {} item(s) whose PNG exists (--overwrite regenerates them)", rank_.rank, stats_.skipped);
    return generate_all(todo);
  }

  /// Dynamic mode: claim chunks of positions from the shared counter.
  bool run_dynamic() {
    const int64_t n = static_cast<int64_t>(items_.size());
    const int64_t chunk = dynamic_chunk_size(n, rank_.world_size, o_.batch_size);
    items_known_ = true;  // todo_ stays -1: no rank knows its share in advance
    report_progress(true);
    for (;;) {
      if (g_stop_signal) return true;
      if (group_->abort_reason()) return false;
      int64_t end = group_->add("next-item", chunk);
      int64_t begin = end - chunk;
      if (begin >= n) break;
      std::vector<const Item*> todo;
      int64_t skipped = 0;
      for (int64_t p = begin; p < std::min(end, n); ++p) {
        if (!o_.overwrite && already_made(items_[p])) {
          ++skipped;
          continue;
        }
        todo.push_back(&items_[p]);
      }
      if (skipped) {
        stats_.skipped += skipped;
        if (multi_node_) group_->add("skipped-items", skipped);
        report_progress(false);
      }
      if (generate_all(todo)) return true;
    }
    if (stats_.skipped) log::info("rank {}: skipped {} item(s) whose PNG exists", rank_.rank, stats_.skipped);
    return false;
  }

  /// Generates `todo` in batches of items that share size, steps and guidance.
  bool generate_all(const std::vector<const Item*>& todo) {
    size_t i = 0;
    while (i < todo.size()) {
      if (g_stop_signal) return true;
      if (auto why = group_->abort_reason()) return false;
      std::vector<const Item*> batch{todo[i]};
      size_t j = i + 1;
      while (j < todo.size() && static_cast<int>(batch.size()) < o_.batch_size && todo[j]->batches_with(*batch[0]))
        batch.push_back(todo[j++]);
      run_batch(batch);
      i = j;
    }
    return false;
  }

  void run_batch(const std::vector<const Item*>& batch) {
    std::vector<pipeline::ImageRequest> reqs;
    for (const Item* it : batch)
      reqs.push_back({it->prompt, it->negative_prompt, static_cast<uint64_t>(it->seed), it->steps, it->guidance_scale,
                      it->width, it->height});
    auto t0 = std::chrono::steady_clock::now();
    std::vector<pipeline::RgbImage> images;
    try {
      images = pipe_->generate(reqs);
      if (images.size() != batch.size()) throw Error("the pipeline returned " + std::to_string(images.size()) +
                                                     " image(s) for a batch of " + std::to_string(batch.size()));
    } catch (const pipeline::Cancelled&) {
      // Stopping, and --stop-timeout is over: nothing of this batch was written or
      // recorded, so the next run makes its items.
      log::warn("rank {}: abandoned a batch of {} item(s) after {:.1f}s (--stop-timeout {}); the next run makes them",
                rank_.rank, batch.size(), seconds_since(t0), o_.stop_timeout_s);
      return;
    } catch (const std::exception& e) {
      if (batch.size() > 1) {
        // Find the culprit: one bad item must not fail its batch-mates.
        log::warn("rank {}: a batch of {} failed ({}); retrying its items one by one", rank_.rank, batch.size(),
                  first_line(e.what()));
        for (const Item* it : batch) run_batch({it});
        return;
      }
      record_failure(*batch[0], first_line(e.what()), seconds_since(t0));
      return;
    }
    double per_image = seconds_since(t0) / static_cast<double>(batch.size());
    stats_.busy_s += seconds_since(t0);
    for (size_t k = 0; k < batch.size(); ++k) {
      const Item& it = *batch[k];
      if (!images[k].finite) {
        record_failure(it, "the decoded image contains NaN or Inf (try --dtype fp32 or bf16)", per_image);
        continue;
      }
      try {
        write_image(it, images[k], per_image);
      } catch (const std::exception& e) {
        record_failure(it, first_line(e.what()), per_image);
      }
    }
  }

  void write_image(const Item& it, const pipeline::RgbImage& img, double seconds) {
    const pipeline::PipelineInfo& info = pipe_->info();
    nlohmann::json rec = item_record(it, info);
    rec["sampler"] = info.sampler_label;
    rec["dtype"] = info.dtype;
    rec["dpinfer_version"] = version();
    std::string png = io::encode_png(img.pixels.data(), img.width, img.height,
                                     {{"parameters", a1111_infotext(it, info)},
                                      {"dpinfer", rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), true}});
    io::write_file_atomically((fs::path(o_.out) / item_file_name(it.index)).string(), png);
    rec.erase("dpinfer_version");
    rec["rank"] = rank_.rank;
    rec["seconds"] = seconds;
    rec["status"] = "ok";
    rec["finished_at"] = now_seconds();
    manifest_->append(rec);
    ++stats_.generated;
    int64_t done = count_in_group("done-items", 1);
    if (todo_ >= 0)
      log::debug("rank {}: item {} done ({}/{} of this rank's items, {} generated in all)", rank_.rank, it.index,
                 stats_.generated + stats_.skipped + stats_.failed, todo_, done);
    else
      log::debug("rank {}: item {} done ({} generated by this rank, {} in all)", rank_.rank, it.index,
                 stats_.generated, done);
    report_progress(false);
  }

  void record_failure(const Item& it, const std::string& message, double seconds) {
    nlohmann::json rec = item_record(it, pipe_->info());
    rec.erase("file_name");
    rec["rank"] = rank_.rank;
    rec["seconds"] = seconds;
    rec["status"] = "error";
    rec["error"] = message;
    rec["finished_at"] = now_seconds();
    manifest_->append(rec);
    ++stats_.failed;
    if (multi_node_) count_in_group("failed-items", 1);
    log::warn("rank {}: item {} failed: {}", rank_.rank, it.index, message);
    report_progress(false);
  }

  /// Adds to a group-wide progress counter once an item is recorded; returns its new
  /// value, or -1. A store that has gone away by then (rank 0 stopped first, on a
  /// signal) must not turn a recorded item into a failed one: the count is only progress.
  int64_t count_in_group(const char* counter, int64_t delta) noexcept {
    try {
      return group_->add(counter, delta);
    } catch (const std::exception& e) {
      log::debug("rank {}: counter '{}' not updated: {}", rank_.rank, counter, first_line(e.what()));
      return -1;
    }
  }

  /// Resume: whether an earlier run made `it`, i.e. its PNG exists and the manifests'
  /// latest record of it says ok. A PNG without such a record (a run killed between
  /// the rename and the manifest line) is made again, so that metadata.jsonl gets its
  /// row. A record that says the item was something else (another prompts file, or
  /// another --seed, --steps, size, guidance or scheduler) is bad input: the two runs
  /// would mix silently in one directory. The manifests are read once, when the
  /// first PNG turns up, so a fresh run pays nothing.
  bool already_made(const Item& it) {
    if (!exists(it)) return false;
    if (!earlier_) earlier_ = io::read_manifests(o_.out);
    auto found = earlier_->items.find(it.index);
    if (found == earlier_->items.end() || found->second.state != io::ItemState::kDone) {
      log::info("rank {}: {} exists but no manifest records it as made (a run stopped between the two); making it "
                "again", rank_.rank, item_file_name(it.index));
      return false;
    }
    const nlohmann::json& before = found->second.record;
    const nlohmann::json now = item_record(it, pipe_->info());
    // What the image is, with the value a record lacking the field stands for: records
    // of older versions have no clip_skip or guidance_rescale, and were made without.
    // The merge's kIdentityFields (io/manifest.cpp) less "model": one model has many
    // names (a path, a hub id), and resume cannot tell them apart.
    static const std::pair<const char*, nlohmann::json> kIdentity[] = {
        {"prompt", nullptr}, {"negative_prompt", nullptr}, {"seed", nullptr},      {"steps", nullptr},
        {"guidance_scale", nullptr}, {"width", nullptr},   {"height", nullptr},    {"scheduler", nullptr},
        {"clip_skip", 0},    {"guidance_rescale", 0}};
    for (const auto& [field, fallback] : kIdentity) {
      const nlohmann::json was = before.value(field, fallback);
      if (was == now[field]) continue;
      throw InputError("--out " + o_.out + " already holds item " + std::to_string(it.index) + " (" +
                       item_file_name(it.index) + ") made with " + field + " " + was.dump() +
                       " (" + found->second.manifest + "), but this run makes it with " + field + " " +
                       now[field].dump() + "; use another --out, or --overwrite to replace the earlier images");
    }
    return true;
  }

  bool exists(const Item& it) const {
    struct stat st;
    return ::stat((fs::path(o_.out) / item_file_name(it.index)).c_str(), &st) == 0 && st.st_size > 0;
  }

  int finish_stopped() {
    int sig = g_stop_signal;
    log::warn("rank {}: stopped by {} after {} image(s); the manifest is complete up to here, and a new run "
              "resumes where this one stopped",
              rank_.rank, sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2",
              stats_.generated);
    return 128 + sig;
  }

  int finish(const pipeline::PipelineInfo& info, const OuterShard& shard) {
    auto all_stats = group_->gather("stats", stats_.to_json().dump());
    group_->barrier("finished");
    if (rank_.rank != 0) return stats_.failed ? exit_status::kItemsFailed : exit_status::kSuccess;
    Stats total;
    nlohmann::json per_rank = nlohmann::json::array();
    for (const auto& s : all_stats) {
      auto j = nlohmann::json::parse(s);
      total.generated += j["generated"].get<int64_t>();
      total.skipped += j["skipped"].get<int64_t>();
      total.failed += j["failed"].get<int64_t>();
      per_rank.push_back(j);
    }
    if (multi_node_) group_totals_ = launcher::ProgressCounts{total.generated, total.skipped, total.failed};
    io::MergeResult merged = io::merge_manifests(o_.out);
    double wall = now_seconds() - started_at_;
    nlohmann::json summary = {{"generated", total.generated}, {"skipped", total.skipped}, {"failed", total.failed},
                              {"wall_seconds", wall}, {"per_rank", per_rank},
                              {"images_per_second", wall > 0 ? total.generated / wall : 0.0},
                              {"metadata_rows", merged.ok}, {"failure_rows", merged.failed}};
    write_run_json(info, shard, &summary);
    log::info("done: {} generated, {} skipped, {} failed in {:.1f}s ({:.2f} images/s); {} row(s) in {}/metadata.jsonl",
              total.generated, total.skipped, total.failed, wall, wall > 0 ? total.generated / wall : 0.0, merged.ok,
              o_.out);
    for (size_t r = 0; r < per_rank.size(); ++r) {
      double secs = per_rank[r]["seconds"].get<double>();
      int64_t generated = per_rank[r]["generated"].get<int64_t>();
      log::info("  rank {}: {} generated, {} skipped, {} failed, {:.2f} images/s", r, generated,
                per_rank[r]["skipped"].get<int64_t>(), per_rank[r]["failed"].get<int64_t>(),
                secs > 0 ? static_cast<double>(generated) / secs : 0.0);
    }
    if (merged.torn_lines) log::warn("{} torn manifest line(s) from an interrupted run were ignored", merged.torn_lines);
    if (total.failed) {
      log::warn("{} item(s) failed; see {}/failures.jsonl", total.failed, o_.out);
      return exit_status::kItemsFailed;
    }
    return exit_status::kSuccess;
  }

  void write_run_json(const pipeline::PipelineInfo& info, const OuterShard& shard, const nlohmann::json* summary) {
    nlohmann::json j = {{"dpinfer_version", version()},
                        {"options", o_.to_json()},
                        {"world_size", rank_.world_size},
                        {"rank_source", rank_.source},
                        {"shard", {{"index", shard.index}, {"count", shard.count}}},
                        {"items_total", total_items_},
                        {"items_in_shard", items_.size()},
                        {"started_at", started_at_},
                        {"pipeline",
                         {{"model", info.model_name}, {"model_path", info.model_path}, {"scheduler", info.scheduler_name},
                          {"sampler", info.sampler_label}, {"device", info.device}, {"dtype", info.dtype},
                          {"clip_skip", info.clip_skip}, {"guidance_rescale", info.guidance_rescale}}},
                        // What a prompts line that sets none gets: the options, else the model's defaults.
                        {"item_defaults",
                         {{"negative_prompt", defaults_.negative_prompt}, {"seed", defaults_.seed},
                          {"steps", defaults_.steps}, {"guidance_scale", defaults_.guidance_scale},
                          {"width", defaults_.width}, {"height", defaults_.height}}}};
    std::error_code ec;
    if (o_.prompts != "-") j["prompts_path"] = fs::absolute(o_.prompts, ec).lexically_normal().string();
    if (slurm_.in_job()) j["slurm"] = slurm_.to_json();
    if (summary) j["summary"] = *summary;
    io::write_file_atomically((fs::path(o_.out) / "run.json").string(), j.dump(2) + "\n");
  }

  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }


  const GenerateOptions& o_;
  const PipelineFactory& factory_;
  RankInfo rank_;
  const SlurmJob slurm_ = SlurmJob::from_env();
  ShardMode mode_ = ShardMode::kContiguous;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<pipeline::TextToImage> pipe_;
  std::vector<Item> items_;
  int64_t total_items_ = 0;
  ItemDefaults defaults_;  ///< resolved item defaults (run.json)
  std::unique_ptr<io::ManifestWriter> manifest_;
  Stats stats_;
  double started_at_ = now_seconds();
  bool multi_node_ = false;
  ProgressPipe progress_ = ProgressPipe::from_env();
  bool items_known_ = false;  ///< this rank's share is known: progress reports may start
  std::optional<io::ManifestSet> earlier_;  ///< the output directory's manifests, once a PNG is found (already_made)
  int64_t todo_ = -1;         ///< this rank's items in a static mode, skipped ones included
  std::chrono::steady_clock::time_point last_report_{};
  std::optional<launcher::ProgressCounts> group_totals_;  ///< rank 0, multi-node: the gathered totals
};

void setup_worker_logging(bool verbose) {
  log::setup(verbose);
  // c10d logs every failed store connect with the exception's C++ backtrace; the
  // worker reports such failures itself, in one line (and --verbose says where it
  // connects). c10's own log shows only when the user sets TORCH_CPP_LOG_LEVEL
  // (e.g. INFO). 3 is c10's FATAL.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = 3;
  // Under `dpinfer launch` every line already carries "[rank N] ".
  const char* launched = std::getenv("DPINFER_LAUNCHED");
  const char* rank = std::getenv("RANK");
  log::set_prefix(!launched && rank ? std::string("[rank ") + rank + "] " : "");
}

int run_generate_guarded(GenerateRun& run) {
  try {
    return run.run();
  } catch (const InputError& e) {
    log::error("{}", e.what());
    run.abort(e.what());
    return exit_status::kBadInput;
  } catch (const WorkerGroup::Interrupted&) {
    log::warn("stopped by signal {} while waiting for the other ranks", static_cast<int>(g_stop_signal));
    run.report_progress(true);
    return 128 + g_stop_signal;
  } catch (const std::exception& e) {
    const std::string msg = first_line(e.what());
    log::error("{}", msg);
    run.report_progress(true);
    run.abort(msg);
    return g_stop_signal ? 128 + g_stop_signal : exit_status::kFatal;
  }
}

}  // namespace

int run_generate(const GenerateOptions& options, const PipelineFactory& make_pipeline) {
  install_stop_handlers();
  GenerateRun run(options, make_pipeline);
  const int status = run_generate_guarded(run);
  run.requeue_if_stopped(status);
  return status;
}

int generate_main(int argc, char** argv, const PipelineFactory& make_pipeline) {
  std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  try {
    std::string help;
    GenerateOptions o = parse_generate_args(args, &help);
    if (!help.empty()) {
      std::cout << help;
      return exit_status::kSuccess;
    }
    setup_worker_logging(o.verbose);
    return run_generate(o, make_pipeline);
  } catch (const UsageError& e) {
    setup_worker_logging(false);
    log::error("{}", e.what());
    return exit_status::kBadInput;
  } catch (const std::exception& e) {
    setup_worker_logging(false);
    log::error("{}", e.what());
    return exit_status::kFatal;
  }
}

}  // namespace dpinfer::worker

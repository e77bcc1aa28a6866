#pragma once
// The workers of one run, joined through a c10d TCPStore hosted by rank 0 at
// MASTER_ADDR:MASTER_PORT (torchrun's static rendezvous). The store listens only where
// the ranks connect (util/listen_socket.h: the loopback on one node), and every key of
// the run lives under the run's secret token (plan/run_token.h). Everything the worker
// needs from its peers goes through the store: a barrier after the model loads,
// a shared work counter for dynamic scheduling, the per-rank statistics gathered
// to rank 0, and an abort flag with which one fatal rank stops the others. On
// CUDA the workers also form a ProcessGroupNCCL, so that a broken NCCL setup
// fails at start rather than later in someone's collective.

#include <chrono>
#include <functional>
#include <stdexcept>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/plan/rank_info.h"
#include "dpinfer/util/error.h"

namespace dpinfer::worker {

class WorkerGroup {
 public:
  struct Options {
    std::chrono::seconds timeout{300};  ///< rendezvous and barrier timeout
    /// Polled while waiting on peers: true makes the wait throw Interrupted (a
    /// stop signal arrived), so that a worker never hangs on a dead peer.
    std::function<bool()> interrupted = [] { return false; };
    /// The run's secret (plan/run_token.h), which every key lives under; needed when the
    /// world has more than one rank. `run_token_source` names where it came from, for errors.
    std::string run_token;
    std::string run_token_source;
  };

  /// Thrown from a wait that `Options::interrupted` cut short.
  struct Interrupted : std::runtime_error {
    Interrupted() : std::runtime_error("interrupted") {}
  };

  /// Thrown when this rank cannot go on because of another one: a rank aborted (its
  /// reason is the message), or the store that rank 0 hosts is gone. Not a failure of
  /// this rank's own: the worker then leaves the blame to the rank that failed first
  /// (worker.cpp).
  struct PeerFailed : Error {
    using Error::Error;
  };

  /// Joins the group; a world of one needs no store. Throws Error saying who
  /// waited for whom, where and for how long, when the rendezvous times out, and
  /// InputError within about a second when rank 0's store hosts a run of another token.
  static std::unique_ptr<WorkerGroup> join(const plan::RankInfo& rank, const Options& options);
  virtual ~WorkerGroup();

  int rank() const { return rank_.rank; }
  int world_size() const { return rank_.world_size; }

  /// Waits until every rank has reached barrier `name`. Throws Error naming the
  /// missing ranks on timeout, or PeerFailed with the reason when another rank aborted.
  void barrier(const std::string& name);
  /// Atomically adds `delta` to the shared counter `key`; returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  /// Rank 0 gets every rank's `value` (index = rank); the others get {}. Waits
  /// for all (with the timeout).
  std::vector<std::string> gather(const std::string& key, const std::string& value);
  /// Tells every rank to stop: a fatal error on this one. The first rank to abort
  /// sets the reason; a later abort does not replace it.
  void abort(const std::string& reason);
  /// The reason another rank gave to abort(), if any. Cheap enough to call per batch.
  std::optional<std::string> abort_reason();
  /// Leaves the group at the end of a run. Rank 0 hosts the store, so it waits
  /// (up to `max_wait`) until every other rank has left before it returns;
  /// otherwise a peer's last store call could find the store gone. A stop signal
  /// (`Options::interrupted`) or an abort ends the wait at once: the peers are
  /// stopping too, and a peer that died would never leave.
  void leave(std::chrono::seconds max_wait);
  /// Forms the ProcessGroupNCCL on `cuda_device` (a no-op in a world of one, or
  /// when this LibTorch build has no NCCL).
  void join_nccl(int cuda_device);
  /// A NCCL barrier on the group's device, when it has NCCL (no-op otherwise).
  void device_barrier();

 private:
  struct Impl;
  WorkerGroup(const plan::RankInfo& rank, const Options& options);
  /// A client rank, once connected: returns when rank 0 has said hello under this rank's
  /// token; throws InputError when the store hosts a run of another token.
  void wait_for_hello(std::chrono::steady_clock::time_point deadline, std::chrono::steady_clock::time_point start);
  plan::RankInfo rank_;
  Options options_;
  int cuda_device_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpinfer::worker

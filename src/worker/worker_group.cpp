#include "dpinfer/worker/worker_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "dpinfer/plan/run_token.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/listen_socket.h"
#include "dpinfer/util/log.h"

namespace dpinfer::worker {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(20);
// Every key below lives under "dpinfer/run/<token>/" (a c10d::PrefixStore), NCCL's
// bootstrap keys ("nccl/...") included.
const std::string kAbortKey = "dpinfer/abort";
// Rank 0 sets kHelloKey under the token, then kHostedKey outside it, whose value is the
// token's fingerprint. A client that finds kHostedKey but not its own kHelloKey is in
// another run. The store is one server, so a rank that sees kHostedKey also sees rank 0's
// kHelloKey; only a foreign client that set kHostedKey before rank 0 did (a window of
// microseconds after the bind) could show one without the other, so a client waits
// kForeignRunGrace before it believes it.
const std::string kHelloKey = "dpinfer/hello";
const std::string kHostedKey = "dpinfer/hosted";
constexpr auto kForeignRunGrace = std::chrono::milliseconds(250);

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

struct WorkerGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;  // under the run's token; null for a world of one
  c10::intrusive_ptr<c10d::Store> tcp;    // the connection itself, for the keys outside the token
  std::string where;                      // "MASTER_ADDR:MASTER_PORT", for errors

  // The store calls the group makes. A store that has gone away (rank 0, or its
  // node, died or stopped) fails each call with c10d's "Broken pipe" or
  // "Connection reset"; that becomes one error that says what it means.
  void set(const std::string& key, const std::string& value) {
    guarded([&] { store->set(key, bytes(value)); });
  }
  int64_t add(const std::string& key, int64_t delta) {
    return guarded([&] { return store->add(key, delta); });
  }
  bool check(const std::string& key) {
    return guarded([&] { return store->check({key}); });
  }
  std::string get(const std::string& key) {
    return guarded([&] { return text(store->get(key)); });
  }

  template <typename F>
  auto guarded(F&& call) -> decltype(call()) {
    std::lock_guard<std::mutex> lock(mu);
    try {
      return call();
    } catch (const std::exception& e) {
      throw PeerFailed("lost the connection to the store at " + where +
                       " that rank 0 hosts: rank 0, or its node, died or stopped (" + first_line(e.what()) + ")");
    }
  }
  std::map<std::string, int64_t> local_counters;  // the counters of a world of one
  // The writer thread counts its items (add) while the denoising thread claims work and
  // polls the abort flag: one store call at a time, and one counter map.
  std::mutex mu;
#ifdef USE_C10D_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
};

WorkerGroup::WorkerGroup(const plan::RankInfo& rank, const Options& options)
    : rank_(rank), options_(options), impl_(std::make_unique<Impl>()) {}

WorkerGroup::~WorkerGroup() {
#ifdef USE_C10D_NCCL
  if (impl_ && impl_->nccl) impl_->nccl->shutdown();
#endif
}

std::unique_ptr<WorkerGroup> WorkerGroup::join(const plan::RankInfo& r, const Options& options) {
  std::unique_ptr<WorkerGroup> g(new WorkerGroup(r, options));
  if (r.world_size == 1) return g;
  const std::string where = r.master_addr + ":" + std::to_string(r.master_port);
  g->impl_->where = where;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(r.master_port);
  so.isServer = r.rank == 0;
  so.numWorkers = static_cast<size_t>(r.world_size);
  // Not waitWorkers: TCPStore's constructor would then block, deaf to stop signals,
  // until every rank has connected. The model-loaded barrier waits for every rank
  // instead, watching for signals and naming the ranks that are missing.
  so.waitWorkers = false;
  if (options.run_token.empty()) throw Error("rank " + std::to_string(r.rank) + " has no run token to join " + where);
  if (r.rank == 0) {
    // Bound here, where the ranks connect, not by TCPStore on every interface.
    ListenSocket listener;
    try {
      listener = listen_for_store(r.master_addr, r.master_port, r.world_size == r.local_world_size);
    } catch (const std::exception& e) {
      throw Error("rank 0 cannot host the store at " + where + ": " + first_line(e.what()));
    }
    if (listener.fallback.empty())
      log::debug("the store listens on {} only", listener.address);
    else
      log::warn("the store listens on every interface ({}): {}; its keys stay under the run's token",
                listener.address, listener.fallback);
    so.masterListenFd = listener.fd;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options.timeout;
  for (;;) {
    // A client connects in slices of at most a second, so that a stop signal (SLURM's
    // SIGTERM while rank 0 is not up yet) is seen within a second, not at the timeout.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    so.timeout = std::clamp(left, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
    c10::intrusive_ptr<c10d::TCPStore> tcp;
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(r.master_addr, so);
      tcp->setTimeout(std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout));
    } catch (const std::exception& e) {
      const std::string why = first_line(e.what());
      if (r.rank == 0)  // the server binds at once or not at all
        throw Error("rank 0 cannot host the store at " + where + ": " + why);
      if (options.interrupted()) throw Interrupted();
      if (std::chrono::steady_clock::now() < deadline) continue;
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw Error("rank " + std::to_string(r.rank) + " waited " + std::to_string(static_cast<int>(waited)) +
                  " s for rank 0's store at " + where +
                  ", in vain (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?): " + why);
    }
    g->impl_->tcp = tcp;
    g->impl_->store = c10::make_intrusive<c10d::PrefixStore>("dpinfer/run/" + options.run_token, tcp);
    if (r.rank == 0) {
      g->impl_->set(kHelloKey, "1");
      g->impl_->guarded([&] { tcp->set(kHostedKey, bytes(plan::run_token_fingerprint(options.run_token))); });
    } else {
      g->wait_for_hello(deadline, start);
    }
    return g;
  }
}

void WorkerGroup::wait_for_hello(std::chrono::steady_clock::time_point deadline,
                                 std::chrono::steady_clock::time_point start) {
  c10d::Store& tcp = *impl_->tcp;
  const std::string where = impl_->where;
  std::optional<std::chrono::steady_clock::time_point> foreign_since;
  for (;;) {
    if (impl_->check(kHelloKey)) return;
    const bool hosted = impl_->guarded([&] { return tcp.check({kHostedKey}); });
    const auto now = std::chrono::steady_clock::now();
    if (hosted && !foreign_since) foreign_since = now;
    if (foreign_since && now - *foreign_since >= kForeignRunGrace) {
      const std::string theirs = impl_->guarded([&] { return text(tcp.get(kHostedKey)); });
      throw InputError("rank " + std::to_string(rank()) + " is refused by the store at " + where +
                       ": it hosts a run of another token (fingerprint " + theirs + "; this rank's is " +
                       plan::run_token_fingerprint(options_.run_token) + ", from " + options_.run_token_source +
                       "); every rank of a run needs the same token: start them from one `dpinfer launch`, or give "
                       "them all the same DPINFER_RUN_TOKEN, or the same --out on a filesystem that every node shares");
    }
    if (options_.interrupted()) throw Interrupted();
    if (now > deadline) {
      const double waited = std::chrono::duration<double>(now - start).count();
      throw Error("rank " + std::to_string(rank()) + " waited " + std::to_string(static_cast<int>(waited)) +
                  " s for rank 0's store at " + where +
                  " to announce the run: something answers there, but not dpinfer's rank 0 (is MASTER_PORT another "
                  "program's?)");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void WorkerGroup::barrier(const std::string& name) {
  if (!impl_->store) return;
  const std::string key = "dpinfer/barrier/" + name;
  impl_->set(key + "/" + std::to_string(rank()), "1");
  impl_->add(key, 1);
  auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    if (impl_->add(key, 0) >= world_size()) return;
    if (options_.interrupted()) throw Interrupted();
    if (auto why = abort_reason()) throw PeerFailed("stopped at barrier '" + name + "': " + *why);
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      int n = 0;
      for (int r = 0; r < world_size() && n < 10; ++r) {
        if (!impl_->check(key + "/" + std::to_string(r))) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          ++n;
        }
      }
      throw Error("rank " + std::to_string(rank()) + " waited " + std::to_string(options_.timeout.count()) +
                  " s at barrier '" + name + "' for rank(s) " + missing + " (store " + rank_.master_addr + ":" +
                  std::to_string(rank_.master_port) + "); they may be stuck loading the model or dead");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

int64_t WorkerGroup::add(const std::string& key, int64_t delta) {
  if (!impl_->store) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->local_counters[key] += delta;
  }
  return impl_->add("dpinfer/counter/" + key, delta);
}

std::vector<std::string> WorkerGroup::gather(const std::string& key_name, const std::string& value) {
  if (!impl_->store) return {value};
  const std::string prefix = "dpinfer/gather/" + key_name + "/";
  impl_->set(prefix + std::to_string(rank()), value);
  if (rank() != 0) return {};
  std::vector<std::string> out;
  auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (int r = 0; r < world_size(); ++r) {
    const std::string key = prefix + std::to_string(r);
    while (!impl_->check(key)) {
      if (options_.interrupted()) throw Interrupted();
      if (auto why = abort_reason()) throw PeerFailed(*why);
      if (std::chrono::steady_clock::now() > deadline)
        throw Error("rank 0 waited " + std::to_string(options_.timeout.count()) + " s for rank " + std::to_string(r) +
                    "'s '" + key_name + "' report; it may be dead or stuck");
      std::this_thread::sleep_for(kPollInterval);
    }
    out.push_back(impl_->get(key));
  }
  return out;
}

void WorkerGroup::abort(const std::string& reason) {
  if (!impl_->store) return;
  try {
    // The first rank to fail keeps its reason, which the others then report (two
    // failing within the same moment may still both set it; either is a root cause).
    if (!impl_->check(kAbortKey)) impl_->set(kAbortKey, "rank " + std::to_string(rank()) + " failed: " + reason);
  } catch (const std::exception&) {
    // The store may be gone already (rank 0 died); the others will find out on their own.
  }
}

std::optional<std::string> WorkerGroup::abort_reason() {
  if (!impl_->store) return std::nullopt;
  if (!impl_->check(kAbortKey)) return std::nullopt;
  return impl_->get(kAbortKey);
}

void WorkerGroup::leave(std::chrono::seconds max_wait) {
  if (!impl_->store) return;
  const std::string key = "dpinfer/left";
  try {
    if (rank() != 0) {
      impl_->add(key, 1);
      return;
    }
    auto deadline = std::chrono::steady_clock::now() + max_wait;
    // A stop signal ends the wait: the peers got it too, and what they still send the
    // store once stopped is progress only, which they may lose (a peer that died, the
    // usual reason for the signal, would otherwise hold rank 0 here to the deadline).
    while (impl_->add(key, 0) < world_size() - 1 && std::chrono::steady_clock::now() < deadline) {
      if (options_.interrupted() || abort_reason()) return;
      std::this_thread::sleep_for(kPollInterval);
    }
  } catch (const std::exception&) {
    // Leaving is best effort: a peer that died has nothing left to say.
  }
}

void WorkerGroup::join_nccl(int cuda_device) {
  cuda_device_ = cuda_device;
#ifdef USE_C10D_NCCL
  if (!impl_->store) return;
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout);
  impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("nccl", impl_->store), rank(), world_size(), opts);
#endif
}

void WorkerGroup::device_barrier() {
#ifdef USE_C10D_NCCL
  if (impl_->nccl) {
    c10d::BarrierOptions bo;
    bo.device_ids = {static_cast<int64_t>(cuda_device_)};
    impl_->nccl->barrier(bo)->wait();
  }
#endif
}

}  // namespace dpinfer::worker

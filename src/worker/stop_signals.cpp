#include "dpinfer/worker/stop_signals.h"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <initializer_list>

#include "dpinfer/util/clock.h"

namespace dpinfer::worker {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
/// monotonic_ns() of the first stop signal (lock-free, so the handler may set it).
std::atomic<int64_t> g_stop_signal_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) {
    g_stop_signal_ns = monotonic_ns();
    g_stop_signal = sig;
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) ::sigaction(s, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

bool stopping_for_at_least(std::chrono::nanoseconds grace) {
  return g_stop_signal != 0 && monotonic_ns() - g_stop_signal_ns >= grace.count();
}

}  // namespace dpinfer::worker

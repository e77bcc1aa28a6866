#pragma once
// The clocks dpinfer reads: a monotonic one for timeouts and rates, the wall clock for records.

#include <chrono>
#include <cstdint>

namespace dpinfer {

/// CLOCK_MONOTONIC in nanoseconds. Async-signal-safe: a signal handler may call it.
int64_t monotonic_ns();

/// Seconds since the Unix epoch, as the records' "finished_at" and run.json's "started_at".
double wall_seconds();

/// Seconds from `start` to now on std::chrono::steady_clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dpinfer

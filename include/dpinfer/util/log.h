#pragma once
// dpinfer's own messages. They go to stderr, one line each, prefixed "[dpinfer]"
// (or "[rank N]" in a worker outside the launcher), so that they stand apart from
// worker output; stdout carries only what workers write to their stdout.
//
// This header uses fmt for formatting but not spdlog: LibTorch bundles a newer
// fmt whose headers shadow Debian's in LibTorch translation units, and spdlog's
// headers only work with the fmt it was built against. So spdlog stays inside
// log.cpp, and LibTorch code may log through here (dpinfer::torch sets
// FMT_HEADER_ONLY, see cmake/Torch.cmake).

#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>

namespace dpinfer::log {

enum class Level { kDebug, kInfo, kWarn, kError };

/// Configures the process-wide logger (stderr, flushed on every line). Only main() calls this.
void setup(bool verbose);
/// Replaces the "[dpinfer] " prefix of every line (e.g. "[rank 3] ", or "").
void set_prefix(const std::string& prefix);
void set_verbose(bool verbose);
/// Sends every line (prefixed, with its '\n') to `sink` instead of stderr, until
/// called with nullptr. The launcher's supervisor queues them with its workers'
/// output, so that a stalled stderr never blocks it in a log call.
void set_redirect(std::function<void(const std::string& line)> sink);

namespace detail {
bool enabled(Level level);
void write(Level level, const std::string& message);
}  // namespace detail

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (detail::enabled(Level::kDebug)) detail::write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (detail::enabled(Level::kInfo)) detail::write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  detail::write(Level::kWarn, "warning: " + fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  detail::write(Level::kError, "error: " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dpinfer::log

#pragma once
// The launcher's own messages. They go to stderr, one line each, prefixed "[dpinfer]",
// so that they stand apart from the workers' "[rank N]" lines; stdout carries only
// what workers write to their stdout.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace dpinfer::log {

/// Configures the process-wide logger (stderr, flushed on every line). Only main() calls this.
void setup(bool verbose);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::info("{}", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::warn("warning: {}", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::error("error: {}", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::debug("{}", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dpinfer::log

#include "dpinfer/util/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>

namespace dpinfer::log {
namespace {

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    // stderr_sink (not the colour one): the lines often end up in SLURM or CI
    // logs, where escape codes are noise.
    auto l = spdlog::stderr_logger_st("dpinfer");
    l->set_pattern("[dpinfer] %v");
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return instance;
}

// The prefix that set_prefix() gave the pattern, for lines that set_redirect() takes.
std::string& line_prefix() {
  static std::string prefix = "[dpinfer] ";
  return prefix;
}

// A worker logs from its denoising thread and its writer thread (worker/write_queue.h):
// one line at a time, through a logger made for one thread.
std::mutex& write_mutex() {
  static std::mutex mu;
  return mu;
}

std::function<void(const std::string&)>& redirect() {
  static std::function<void(const std::string&)> sink;
  return sink;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void setup(bool verbose) { set_verbose(verbose); }

void set_verbose(bool verbose) { logger()->set_level(verbose ? spdlog::level::debug : spdlog::level::info); }

void set_redirect(std::function<void(const std::string& line)> sink) { redirect() = std::move(sink); }

void set_prefix(const std::string& prefix) {
  line_prefix() = prefix;
  std::string pattern = prefix;
  // spdlog patterns treat '%' specially.
  size_t pos = 0;
  while ((pos = pattern.find('%', pos)) != std::string::npos) pattern.insert(pos, "%"), pos += 2;
  logger()->set_pattern(pattern + "%v");
}

namespace detail {
bool enabled(Level level) { return logger()->should_log(to_spdlog(level)); }
void write(Level level, const std::string& message) {
  std::lock_guard<std::mutex> lock(write_mutex());
  if (redirect()) {
    if (enabled(level)) redirect()(line_prefix() + message + "\n");
    return;
  }
  logger()->log(to_spdlog(level), "{}", message);
}
}  // namespace detail

}  // namespace dpinfer::log

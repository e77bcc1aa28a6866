#include "dpinfer/util/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace dpinfer::log {

void setup(bool verbose) {
  // stderr_sink (not the colour one): the launcher's lines are often captured by
  // SLURM or CI logs, where escape codes are noise.
  auto logger = spdlog::stderr_logger_st("dpinfer");
  logger->set_pattern("[dpinfer] %v");
  logger->set_level(verbose ? spdlog::level::debug : spdlog::level::info);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace dpinfer::log

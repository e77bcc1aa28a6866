#pragma once
// Pieces shared by the model config parsers (models/*/*_config.cpp).

#include <cstdint>
#include <string>

#include "dpinfer/io/config_reader.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

/// Reads `path` and parses it with Config::from_json; errors name `component` and the file.
template <typename Config>
Config config_from_file(const std::string& path, const std::string& component) {
  nlohmann::json j;
  try {
    j = io::read_json_file(path, "fix or re-download it");
  } catch (const Error& e) {
    throw Error(component + ": " + e.what());
  }
  try {
    return Config::from_json(j);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in '" + path + "')");
  }
}

/// config_from_file() for a config type with more than one parser (one per model class):
/// `parse` turns the parsed json into the config.
template <typename Parse>
auto config_from_file(const std::string& path, const std::string& component, Parse parse) {
  nlohmann::json j;
  try {
    j = io::read_json_file(path, "fix or re-download it");
  } catch (const Error& e) {
    throw Error(component + ": " + e.what());
  }
  try {
    return parse(j);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in '" + path + "')");
  }
}

/// `value` (the config field `field`), or an error unless min <= value <= max: the bound that keeps a
/// corrupt config failing here and not in the allocator.
inline int64_t bounded_integer(const io::ConfigReader& r, const std::string& field, int64_t value, int64_t min,
                               int64_t max) {
  if (value < min || value > max)
    throw r.error(field, "= " + std::to_string(value) + " must be in [" + std::to_string(min) + ", " +
                             std::to_string(max) + "]");
  return value;
}

/// The integer field `name` (`fallback` when absent), bounded_integer().
inline int64_t bounded_integer_field(const io::ConfigReader& r, const std::string& name, int64_t fallback,
                                     int64_t min, int64_t max) {
  return bounded_integer(r, name, r.integer(name, fallback), min, max);
}

/// Throws unless `value` (the config field `field`) is divisible by `by` (named `by_name`).
inline void check_divisible(const io::ConfigReader& r, const std::string& field, int64_t value,
                            const std::string& by_name, int64_t by) {
  if (value % by != 0)
    throw r.error(field, "= " + std::to_string(value) + " must be divisible by " + by_name + " = " + std::to_string(by));
}

}  // namespace dpinfer::pipeline

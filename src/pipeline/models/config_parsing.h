#pragma once
// Pieces shared by the model config parsers (models/*/*_config.cpp).

#include <cstdint>
#include <string>

#include "dpinfer/io/config_reader.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

/// What the DiT transformer configs (models/transformers/*_config.cpp) share: the component name
/// their errors give, and bounds well above every real model's, so that a corrupt config fails
/// while it is read and not in the allocator. The largest: FLUX.1 (19 + 38 blocks, 24 heads of
/// 128, joint 4096), FLUX.2 [dev] (8 + 48 blocks, 48 heads of 128, joint 15360), Qwen-Image (60
/// layers, joint 3584), SD3.5-Large (38 layers, 38 heads of 64, pos_embed_max_size 192), Z-Image
/// (dim 3840, 30 layers, cap_feat_dim 2560), Chroma1-HD (an approximator of 5 layers of 5120).
namespace transformer_config {
inline constexpr const char* kComponent = "transformer config";
inline constexpr int64_t kMaxWidth = 1 << 16;
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxPatch = 64;
}  // namespace transformer_config

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

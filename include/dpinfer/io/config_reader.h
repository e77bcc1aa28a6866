#pragma once
// Typed, checked access to one parsed config object (a model's config.json, a
// scheduler_config.json, a tokenizer_config.json), read the way diffusers' and
// transformers' from_config read it: a key that is absent or null takes the
// default. Every error names the config and the field, quotes the bad value
// (bounded and escaped), and says what was expected.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/util/error.h"

namespace dpinfer::io {

class ConfigReader {
 public:
  /// `where` starts every message ("unet config", "scheduler_config.json (the euler scheduler)");
  /// `advice`, when given, ends it ("change the config or pick another scheduler").
  /// Throws Error when `object` is not a JSON object.
  ConfigReader(nlohmann::json object, std::string where, std::string advice = "");

  const std::string& where() const { return where_; }
  /// The value of `key`, or nullptr when it is absent or null.
  const nlohmann::json* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  /// A JSON integer, or a float with an integral value (Python writes 2.0 for an int
  /// that passed through a float; from_config takes it).
  int64_t integer(const std::string& key, int64_t fallback) const;
  /// integer(), and it must be > 0.
  int64_t positive(const std::string& key, int64_t fallback) const;
  /// A number, or Python's NaN/Infinity/-Infinity (see python_json.h).
  double number(const std::string& key, double fallback) const;
  /// number(), or nullopt when absent (diffusers' Optional[float] = None).
  std::optional<double> optional_number(const std::string& key) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  /// A non-empty list of strings.
  std::vector<std::string> strings(const std::string& key, std::vector<std::string> fallback) const;
  /// A non-empty list of integers.
  std::vector<int64_t> integers(const std::string& key, std::vector<int64_t> fallback) const;
  /// A list of numbers, or nullopt when absent.
  std::optional<std::vector<double>> numbers(const std::string& key) const;
  /// diffusers' "an int, or one per block" settings, expanded to `n` entries.
  std::vector<int64_t> per_block(const std::string& key, int64_t fallback, size_t n) const;
  /// The same for booleans.
  std::vector<bool> per_block_bool(const std::string& key, bool fallback, size_t n) const;

  /// A setting dpinfer does not implement must be absent, null, or its inert value.
  void require_null(const std::string& key) const;
  void require_false(const std::string& key) const;
  void require_string(const std::string& key, const std::string& only, const std::string& fallback) const;

  /// "<where>: <field> <what>[; <advice>]".
  Error error(const std::string& field, const std::string& what) const;
  /// "<where>: <field> <value> is not supported; supported: <supported>[; <advice>]".
  Error unsupported(const std::string& field, const nlohmann::json& value, const std::string& supported) const;
  /// "<key>[<i>]", the name of one element of a list field.
  static std::string indexed(const std::string& key, size_t i) { return key + "[" + std::to_string(i) + "]"; }
  /// A JSON value as messages quote it: a string in quotes, anything else dumped, at most
  /// 60 bytes, escaped.
  static std::string show(const nlohmann::json& value);

 private:
  int64_t as_integer(const nlohmann::json& value, const std::string& field) const;

  nlohmann::json object_;
  std::string where_;
  std::string advice_;
};

}  // namespace dpinfer::io

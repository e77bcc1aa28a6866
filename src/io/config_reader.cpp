#include "dpinfer/io/config_reader.h"

#include <cmath>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/python_json.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {

ConfigReader::ConfigReader(nlohmann::json object, std::string where, std::string advice)
    : object_(std::move(object)), where_(std::move(where)), advice_(std::move(advice)) {
  if (!object_.is_object()) throw error("", "expected a json object, got " + show(object_));
}

std::string ConfigReader::show(const nlohmann::json& value) {
  if (value.is_string()) return quote(value.get_ref<const std::string&>(), 60);
  // Bounded in time and size whatever the value (a config array may hold millions of numbers).
  return json_brief(value, 60);
}

Error ConfigReader::error(const std::string& field, const std::string& what) const {
  std::string message = where_ + ": " + (field.empty() ? "" : field + " ") + what;
  if (!advice_.empty()) message += "; " + advice_;
  return Error(message);
}

Error ConfigReader::unsupported(const std::string& field, const nlohmann::json& value,
                                const std::string& supported) const {
  return error(field, show(value) + " is not supported; supported: " + supported);
}

const nlohmann::json* ConfigReader::find(const std::string& key) const {
  auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

int64_t ConfigReader::as_integer(const nlohmann::json& v, const std::string& field) const {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw error(field, "is out of range, got " + show(v));
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  throw error(field, "must be an integer, got " + show(v));
}

int64_t ConfigReader::integer(const std::string& key, int64_t fallback) const {
  const nlohmann::json* v = find(key);
  return v == nullptr ? fallback : as_integer(*v, key);
}

int64_t ConfigReader::positive(const std::string& key, int64_t fallback) const {
  const int64_t v = integer(key, fallback);
  if (v <= 0) throw error(key, "must be positive, got " + std::to_string(v));
  return v;
}

double ConfigReader::number(const std::string& key, double fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  std::optional<double> d = python_json_number(*v);
  if (!d) throw error(key, "must be a number, got " + show(*v));
  return *d;
}

std::optional<double> ConfigReader::optional_number(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return number(key, 0.0);
}

bool ConfigReader::boolean(const std::string& key, bool fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw error(key, "must be true or false, got " + show(*v));
  return v->get<bool>();
}

std::string ConfigReader::string(const std::string& key, const std::string& fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) throw error(key, "must be a string, got " + show(*v));
  return v->get<std::string>();
}

std::vector<std::string> ConfigReader::strings(const std::string& key, std::vector<std::string> fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_array() || v->empty()) throw error(key, "must be a non-empty list of strings, got " + show(*v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) throw error(indexed(key, i), "must be a string, got " + show((*v)[i]));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::vector<int64_t> ConfigReader::integers(const std::string& key, std::vector<int64_t> fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_array() || v->empty()) throw error(key, "must be a non-empty list of integers, got " + show(*v));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) out.push_back(as_integer((*v)[i], indexed(key, i)));
  return out;
}

std::optional<std::vector<double>> ConfigReader::numbers(const std::string& key) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) throw error(key, "must be a list of numbers, got " + show(*v));
  std::vector<double> out;
  for (size_t i = 0; i < v->size(); ++i) {
    std::optional<double> d = python_json_number((*v)[i]);
    if (!d) throw error(indexed(key, i), "must be a number, got " + show((*v)[i]));
    out.push_back(*d);
  }
  return out;
}

std::vector<int64_t> ConfigReader::per_block(const std::string& key, int64_t fallback, size_t n) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return std::vector<int64_t>(n, fallback);
  if (v->is_array()) {
    if (v->size() != n)
      throw error(key, "must be an integer or a list of " + std::to_string(n) + " (one per down block), got " +
                           show(*v));
    std::vector<int64_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(as_integer((*v)[i], indexed(key, i)));
    return out;
  }
  return std::vector<int64_t>(n, as_integer(*v, key));
}

std::vector<bool> ConfigReader::per_block_bool(const std::string& key, bool fallback, size_t n) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return std::vector<bool>(n, fallback);
  if (v->is_boolean()) return std::vector<bool>(n, v->get<bool>());
  if (!v->is_array() || v->size() != n)
    throw error(key, "must be true, false or a list of " + std::to_string(n) + " booleans, got " + show(*v));
  std::vector<bool> out;
  for (size_t i = 0; i < n; ++i) {
    if (!(*v)[i].is_boolean()) throw error(indexed(key, i), "must be true or false, got " + show((*v)[i]));
    out.push_back((*v)[i].get<bool>());
  }
  return out;
}

void ConfigReader::require_null(const std::string& key) const {
  if (const nlohmann::json* v = find(key)) throw unsupported(key, *v, "null");
}

void ConfigReader::require_false(const std::string& key) const {
  if (boolean(key, false)) throw unsupported(key, true, "false");
}

void ConfigReader::require_string(const std::string& key, const std::string& only, const std::string& fallback) const {
  const std::string v = string(key, fallback);
  if (v != only) throw unsupported(key, v, only);
}

}  // namespace dpinfer::io

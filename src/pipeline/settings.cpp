#include "dpinfer/pipeline/settings.h"

#include <fmt/format.h>

#include <cmath>

#include "dpinfer/io/config_reader.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

const SettingSpec* find_spec(const std::vector<SettingSpec>& specs, const std::string& name) {
  for (const SettingSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

namespace {

/// `value` as `spec` wants it, or an InputError naming `where` and the key.
nlohmann::json checked(const SettingSpec& spec, const nlohmann::json& value, const std::string& where) {
  auto fail = [&](const std::string& what) {
    throw InputError(where + ": setting '" + spec.name + "' " + what + ", got " + io::ConfigReader::show(value));
  };
  auto range = [&](double v) {
    if (!std::isfinite(v) || v < spec.min || v > spec.max)
      fail(fmt::format("must be in {:g}..{:g}", spec.min, spec.max));
  };
  switch (spec.type) {
    case SettingSpec::Type::kBoolean:
      if (!value.is_boolean()) fail("must be true or false");
      return value;
    case SettingSpec::Type::kInteger:
      if (!value.is_number_integer()) fail("must be an integer");
      if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        fail(fmt::format("must be in {:g}..{:g}", spec.min, spec.max));
      range(static_cast<double>(value.get<int64_t>()));
      return value.get<int64_t>();
    case SettingSpec::Type::kNumber:
      if (!value.is_number()) fail("must be a number");
      range(value.get<double>());
      return value.get<double>();
    case SettingSpec::Type::kIntegerList: {
      constexpr size_t kMaxItems = 1000;
      const std::string want = fmt::format("must be a list of at most {} integers in {:g}..{:g}, e.g. [7, 8, 9]",
                                           kMaxItems, spec.min, spec.max);
      if (!value.is_array() || value.size() > kMaxItems) fail(want);
      nlohmann::json out = nlohmann::json::array();
      for (const nlohmann::json& item : value) {
        if (!item.is_number_integer()) fail(want);
        if (item.is_number_unsigned() && item.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(want);
        const int64_t v = item.get<int64_t>();
        if (static_cast<double>(v) < spec.min || static_cast<double>(v) > spec.max) fail(want);
        out.push_back(v);
      }
      return out;
    }
  }
  return value;
}

}  // namespace

std::string setting_names(const std::vector<SettingSpec>& specs) {
  std::vector<std::string> names;
  for (const SettingSpec& s : specs) names.push_back(s.name);
  return names.empty() ? std::string("none") : join(names);
}

nlohmann::json resolve_settings(const std::vector<SettingSpec>& specs, const nlohmann::json& given,
                                const std::string& where, const std::string& family_label) {
  if (!given.is_null() && !given.is_object())
    throw InputError(where + ": settings must be an object such as {\"clip_skip\": 1}, got " +
                     io::ConfigReader::show(given));
  if (given.is_object())
    for (const auto& [key, value] : given.items())
      if (!find_spec(specs, key))
        throw InputError(where + ": " + quote(key, 60) + " is not a setting of " + family_label +
                         " models; their settings: " + setting_names(specs));
  nlohmann::json out = nlohmann::json::object();
  for (const SettingSpec& spec : specs) {
    auto it = given.is_object() ? given.find(spec.name) : given.end();
    out[spec.name] = given.is_object() && it != given.end() ? checked(spec, *it, where) : spec.default_value;
  }
  return out;
}

std::string settings_infotext(const std::vector<SettingSpec>& specs, const nlohmann::json& settings) {
  std::string out;
  for (const SettingSpec& spec : specs) {
    if (spec.infotext_label.empty() || !settings.contains(spec.name)) continue;
    const nlohmann::json& v = settings[spec.name];
    if (v == spec.default_value) continue;
    std::string text;
    if (v.is_number_integer()) {
      text = std::to_string(v.get<int64_t>() + spec.infotext_offset);
    } else if (v.is_number()) {
      text = fmt::format("{:g}", v.get<double>() + spec.infotext_offset);
    } else if (v.is_array()) {
      // AUTOMATIC1111 quotes a value that holds a comma: "7,8,9".
      for (const nlohmann::json& item : v) text += (text.empty() ? "" : ",") + std::to_string(item.get<int64_t>());
      text = "\"" + text + "\"";
    } else {
      text = v.dump();
    }
    out += ", " + spec.infotext_label + ": " + text;
  }
  return out;
}

}  // namespace dpinfer::pipeline

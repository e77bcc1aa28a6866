#include "dpinfer/io/lora_ref.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {

LoraRef parse_lora_arg(const std::string& text, const std::string& where) {
  LoraRef ref;
  ref.path = text;
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon + 1 < text.size()) {
    const std::string tail = text.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    if (end && *end == '\0' && std::isfinite(v) && tail.find_first_of("xXpPnN") == std::string::npos) {
      ref.path = text.substr(0, colon);
      ref.scale = v;
    }
  }
  if (ref.path.empty())
    throw InputError(where + ": " + quote(text, 80) + " names no file; give PATH or PATH:SCALE, e.g. style.safetensors:0.8");
  return ref;
}

LoraSet lora_set_from_json(const nlohmann::json& value, const std::string& where) {
  const std::string example = " such as [{\"path\": \"style.safetensors\", \"scale\": 0.8}]";
  if (!value.is_array()) throw InputError(where + ": 'loras' must be an array" + example + ", got " + json_brief(value));
  LoraSet set;
  for (const nlohmann::json& v : value) {
    if (v.is_string()) {
      set.push_back(parse_lora_arg(v.get<std::string>(), where + ": 'loras'"));
      continue;
    }
    if (!v.is_object()) throw InputError(where + ": each of 'loras' must be an object" + example + ", got " + json_brief(v));
    LoraRef ref;
    for (const auto& [key, field] : v.items()) {
      if (key == "path" && field.is_string() && !field.get<std::string>().empty()) {
        ref.path = field.get<std::string>();
      } else if (key == "scale" && field.is_number() && std::isfinite(field.get<double>())) {
        ref.scale = field.get<double>();
      } else if (key == "path" || key == "scale") {
        throw InputError(where + ": 'loras' " + key + " must be " +
                         (key == "path" ? "a non-empty string" : "a finite number") + ", got " + json_brief(field));
      } else {
        throw InputError(where + ": 'loras' has the unknown key " + quote(key, 40) + "; use path and scale");
      }
    }
    if (ref.path.empty()) throw InputError(where + ": a 'loras' entry lacks its path" + example);
    set.push_back(std::move(ref));
  }
  return set;
}

std::string lora_name(const std::string& path) { return std::filesystem::path(path).stem().string(); }

std::string lora_set_text(const LoraSet& set) {
  std::string s;
  for (const LoraRef& r : set) s += (s.empty() ? "" : " ") + fmt::format("<lora:{}:{:g}>", lora_name(r.path), r.scale);
  return s;
}

}  // namespace dpinfer::io

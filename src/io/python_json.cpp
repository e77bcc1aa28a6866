#include "dpinfer/io/python_json.h"

#include <cstring>
#include <limits>

namespace dpinfer::io {
namespace {

const char* const kTokens[] = {"-Infinity", "Infinity", "NaN"};

}  // namespace

nlohmann::json parse_python_json(const std::string& text, const nlohmann::json::parser_callback_t& callback) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];  // an escaped character, possibly a quote
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const char* token : kTokens) {
      const size_t n = std::strlen(token);
      if (text.compare(i, n, token) == 0) {
        out += '"';
        out += token;
        out += '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return nlohmann::json::parse(out, callback);
}

std::optional<double> python_json_number(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

}  // namespace dpinfer::io

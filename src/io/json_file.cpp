#include "dpinfer/io/json_file.h"

#include <set>
#include <vector>

#include "dpinfer/io/python_json.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

using nlohmann::json;

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string reason_of(const json::exception& e) {
  std::string why = e.what();
  const size_t bracket = why.find("] ");
  if (bracket != std::string::npos) why = why.substr(bracket + 2);
  if (why.rfind("parse error ", 0) == 0) why = why.substr(12);  // "at line 1, column 2: ..."
  return printable(why, 200);
}

/// Thrown from the parser callback to stop at the depth limit.
struct TooDeep {};

constexpr int kBriefDepth = 8;

/// `s` as a JSON string literal, of at most about `room` bytes of `s`.
void brief_string(std::string& out, const std::string& s, size_t room) {
  out += json(s.substr(0, room)).dump(-1, ' ', false, json::error_handler_t::replace);
}

void brief_into(std::string& out, const json& v, int depth, size_t limit) {
  if (out.size() > limit) return;
  const size_t room = limit - out.size() + 4;  // past the limit: the caller cuts there
  if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    if (v.empty()) {
      out += object ? "{}" : "[]";
      return;
    }
    if (depth >= kBriefDepth) {
      out += object ? "{...}" : "[...]";
      return;
    }
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > limit) return;
      if (!first) out += ',';
      first = false;
      if (object) {
        brief_string(out, it.key(), limit - std::min(limit, out.size()) + 4);
        out += ':';
      }
      brief_into(out, it.value(), depth + 1, limit);
    }
    out += object ? '}' : ']';
  } else if (v.is_string()) {
    brief_string(out, v.get_ref<const std::string&>(), room);
  } else {
    out += v.dump();  // a number, true, false or null: a few bytes
  }
}

}  // namespace

JsonDuplicateKey::JsonDuplicateKey(std::string key, int depth)
    : JsonSyntaxError("key " + quote(key, 100) + " appears twice in one object"), key_(std::move(key)), depth_(depth) {}

nlohmann::json parse_json_text(std::string_view text, JsonDialect dialect, bool unique_keys) {
  std::vector<std::set<std::string>> keys;  // per open object, with unique_keys
  auto watch = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) throw TooDeep{};
        if (unique_keys) keys.emplace_back();  // arrays too, so that the stack follows the nesting
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (unique_keys && !keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (unique_keys && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw JsonDuplicateKey(parsed.get<std::string>(), static_cast<int>(keys.size()));
        break;
      default:
        break;
    }
    return true;
  };
  try {
    if (dialect == JsonDialect::kPython) return parse_python_json(std::string(text), watch);
    return json::parse(text.begin(), text.end(), watch);
  } catch (const TooDeep&) {
    throw JsonSyntaxError("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number such as 1e999
    throw JsonSyntaxError(reason_of(e));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& advice) {
  std::string text, why;
  const ReadStatus status = read_whole_file(path, kMaxJsonFileBytes, &text, &why);
  if (status == ReadStatus::kTooLarge)
    throw Error(quote(path) + " is " + why + " for a json file; no json file dpinfer reads is that large, so it is "
                "corrupt: re-download it");
  if (status != ReadStatus::kOk) throw Error(quote(path) + ": cannot read: " + why);
  try {
    return parse_json_text(text);
  } catch (const JsonSyntaxError& e) {
    throw Error(quote(path) + " is not valid json (" + e.what() + "); " + advice);
  }
}

nlohmann::json read_json_object_file(const std::string& path, const std::string& advice) {
  nlohmann::json value = read_json_file(path, advice);
  if (!value.is_object())
    throw Error(quote(path) + " is a json " + std::string(value.type_name()) + ", expected an object; " + advice);
  return value;
}

std::string json_brief(const nlohmann::json& value, size_t max_bytes) {
  std::string raw;
  brief_into(raw, value, 0, max_bytes);
  const bool cut = raw.size() > max_bytes;
  if (cut) {
    size_t end = max_bytes;
    while (end > 0 && (static_cast<unsigned char>(raw[end]) & 0xC0) == 0x80) --end;  // a character boundary
    raw.resize(end);
  }
  std::string out = printable(raw, 4 * max_bytes + 16);
  return cut ? out + "..." : out;
}

}  // namespace dpinfer::io

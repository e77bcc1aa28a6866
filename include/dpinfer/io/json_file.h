#pragma once
// The one way dpinfer reads JSON it did not write: model_index.json, config.json,
// scheduler_config.json, tokenizer files, weight indexes, --config files, prompts
// files' JSON lines, safetensors headers and manifests. And the one way a message
// quotes a JSON value: json_brief().

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dpinfer::io {

/// Nesting deeper than this is refused while parsing. No config dpinfer reads comes
/// close, and nlohmann's recursive copy, comparison and dump() overflow the stack on a
/// value nested some 80,000 levels deep (its parser and destructor are iterative).
constexpr int kMaxJsonDepth = 64;

/// The largest JSON file read whole; configs are kilobytes, a tokenizer.json megabytes.
constexpr uintmax_t kMaxJsonFileBytes = 64 * 1024 * 1024;

/// Why a text is not the JSON dpinfer accepts, in one line without nlohmann's
/// "[json.exception...]" prefix: "syntax error at line 1, column 12: ...",
/// "nested deeper than 64 levels", "number overflow parsing '1e999'", all escaped
/// and bounded as printable() does.
class JsonSyntaxError : public std::runtime_error {
 public:
  explicit JsonSyntaxError(const std::string& reason) : std::runtime_error(reason) {}
};

/// A key given twice in one object (parse_json_text with unique_keys). JSON allows it and
/// keeps the last, which in a file a person wrote is a mistake, and in a safetensors
/// header a corrupt file.
class JsonDuplicateKey : public JsonSyntaxError {
 public:
  JsonDuplicateKey(std::string key, int depth);
  const std::string& key() const { return key_; }  ///< raw: quote() it for a message
  int depth() const { return depth_; }              ///< 1 for a key of the outermost object

 private:
  std::string key_;
  int depth_;
};

/// What parse_json_text accepts besides RFC 8259 JSON.
enum class JsonDialect {
  kStrict,  ///< nothing: what a person writes (prompts files, --config) and what safetensors holds
  kPython,  ///< the bare NaN, Infinity and -Infinity of Python's json module (diffusers' configs)
};

/// Parses `text`, at most kMaxJsonDepth deep. With kPython, the bare NaN, Infinity and
/// -Infinity that Python's json module writes are read as the strings "NaN", "Infinity",
/// "-Infinity" (python_json.h). With `unique_keys`, a key given twice in one object
/// throws JsonDuplicateKey. Throws JsonSyntaxError for anything else nlohmann refuses,
/// a number out of range (1e999) included.
nlohmann::json parse_json_text(std::string_view text, JsonDialect dialect = JsonDialect::kPython,
                               bool unique_keys = false);

/// Reads and parses `path` (at most kMaxJsonFileBytes, kPython dialect). Throws
/// dpinfer::Error naming the file: "'PATH' is not valid json (REASON); ADVICE",
/// "'PATH': cannot read: ...". `advice` says what to do about a bad file ("fix or
/// re-download it").
nlohmann::json read_json_file(const std::string& path, const std::string& advice = "fix or re-download it");

/// read_json_file(), and the value must be an object: "'PATH' is a json array, expected an object".
nlohmann::json read_json_object_file(const std::string& path, const std::string& advice = "fix or re-download it");

/// `value` as compact JSON for a one-line message, e.g. "[2,-3]" or "\"Q4\"": at most
/// `max_bytes` of it, then "...", containers below 8 levels shown as [...] / {...}, and
/// control characters escaped as printable() does. Its cost is bounded by `max_bytes`
/// whatever the size or depth of `value`, so no message ever calls dump() on input.
std::string json_brief(const nlohmann::json& value, size_t max_bytes = 60);

}  // namespace dpinfer::io

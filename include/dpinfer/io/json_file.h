#pragma once
// The one way dpinfer reads a JSON file it did not write: model_index.json, config.json,
// scheduler_config.json, tokenizer files, weight indexes.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dpinfer::io {

/// Nesting deeper than this is refused while parsing. No config dpinfer reads comes
/// close, and nlohmann's recursive destructor and dump() overflow the stack on a
/// file nested some 80,000 levels deep.
constexpr int kMaxJsonDepth = 64;

/// The largest JSON file read whole; configs are kilobytes, a tokenizer.json megabytes.
constexpr uintmax_t kMaxJsonFileBytes = 64 * 1024 * 1024;

/// Why a text is not the JSON dpinfer accepts, in one line without nlohmann's
/// "[json.exception...]" prefix: "syntax error at line 1, column 12: ...",
/// "nested deeper than 64 levels at byte 130", "number overflow ...".
class JsonSyntaxError : public std::runtime_error {
 public:
  explicit JsonSyntaxError(const std::string& reason) : std::runtime_error(reason) {}
};

/// Parses `text`: strict JSON, plus the bare NaN, Infinity and -Infinity that Python's
/// json module writes (as the strings "NaN", "Infinity", "-Infinity"; see python_json.h),
/// at most kMaxJsonDepth deep. Throws JsonSyntaxError.
nlohmann::json parse_json_text(std::string_view text);

/// Reads and parses `path` (at most kMaxJsonFileBytes). Throws dpinfer::Error naming the
/// file: "'PATH' is not valid json (REASON); ADVICE", "'PATH': cannot read: ...".
/// `advice` says what to do about a bad file ("fix or re-download it").
nlohmann::json read_json_file(const std::string& path, const std::string& advice = "fix or re-download it");

/// read_json_file(), and the value must be an object: "'PATH' is a json array, expected an object".
nlohmann::json read_json_object_file(const std::string& path, const std::string& advice = "fix or re-download it");

}  // namespace dpinfer::io

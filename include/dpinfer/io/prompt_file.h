#pragma once
// Prompt files: .txt (one prompt per line) and .jsonl (one object per line).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/io/lora_ref.h"

namespace dpinfer::io {

/// An inclusive range of what a prompt line or the command line may ask for. The JSONL
/// parser and `dpinfer generate`'s options (plan/generate_options.cpp) both check
/// against these, so a value is refused the same way wherever it is given.
struct IntRange {
  long long min, max;
  bool contains(long long v) const { return v >= min && v <= max; }
  std::string text() const { return std::to_string(min) + ".." + std::to_string(max); }
};
constexpr IntRange kStepsRange{1, 10000};
constexpr IntRange kImageSizeRange{8, 16384};  ///< width and height, in pixels
constexpr IntRange kImagesPerLineRange{1, 100000};

/// The largest prompts file read: it is read whole, and every line's prompt is kept.
/// It also keeps line numbers within an int.
constexpr uintmax_t kMaxPromptFileBytes = uintmax_t{1} << 30;

/// One prompt line and the per-line overrides a .jsonl line may carry.
struct PromptSpec {
  int line = 0;  ///< 1-based line in the file, for messages
  std::string prompt;
  std::optional<std::string> negative_prompt;
  std::optional<int64_t> seed;
  std::optional<int> steps;
  std::optional<double> guidance_scale;
  std::optional<int> width;
  std::optional<int> height;
  std::optional<int> num_images;  ///< else the run's --num-images
  std::optional<std::string> id;
  /// The line's model settings ({"clip_skip": 1}): an object, checked against the model's
  /// family once it is loaded (the file knows nothing of models).
  std::optional<nlohmann::json> settings;
  /// The line's LoRAs ("loras": [{"path": ..., "scale": ...}]), instead of the run's; paths as
  /// written (the worker resolves them against the current directory).
  std::optional<LoraSet> loras;
};

/// Reads `path` ("-" is stdin), at most kMaxPromptFileBytes. `.jsonl` files hold objects
/// with the keys `prompt` (required), `negative_prompt`, `seed`, `steps`,
/// `guidance_scale`, `width`, `height`, `num_images`, `id`, `settings` (an object of
/// the model family's settings) and `loras` (io/lora_ref.h); anything else is a .txt
/// file: one prompt per line, UTF-8, CRLF and a BOM accepted, blank lines skipped, and a
/// line whose first non-blank character is `#` a comment. A prompt that starts with `#`
/// is written `\#`: when a .txt line's first non-blank characters are backslashes and
/// then `#`, one backslash is dropped (`\#tag` is the prompt `#tag`, `\\#tag` is `\#tag`).
/// Throws InputError naming the file and line for invalid UTF-8, bad JSON, an unknown key
/// or a bad value; every quoted value is escaped and cut short (util/strings.h).
std::vector<PromptSpec> read_prompt_file(const std::string& path, bool jsonl_stdin = false);

/// Parses already-read content (see read_prompt_file); `name` is used in messages.
std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, bool jsonl);

}  // namespace dpinfer::io

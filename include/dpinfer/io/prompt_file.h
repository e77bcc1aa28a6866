#pragma once
// Prompt files: .txt (one prompt per line) and .jsonl (one object per line).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dpinfer::io {

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
  int num_images = 1;
  std::optional<std::string> id;
  /// The line's model settings ({"clip_skip": 1}): an object, checked against the model's
  /// family once it is loaded (the file knows nothing of models).
  std::optional<nlohmann::json> settings;
};

/// Reads `path` ("-" is stdin). `.jsonl` files hold objects with the keys `prompt`
/// (required), `negative_prompt`, `seed`, `steps`, `guidance_scale`, `width`,
/// `height`, `num_images`, `id` and `settings` (an object of the model family's settings);
/// anything else is a .txt file: one prompt per
/// line, UTF-8, CRLF and a BOM accepted, blank lines skipped. Throws Error naming
/// the file and line for invalid UTF-8, bad JSON, an unknown key or a bad value.
std::vector<PromptSpec> read_prompt_file(const std::string& path, bool jsonl_stdin = false);

/// Parses already-read content (see read_prompt_file); `name` is used in messages.
std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, bool jsonl);

}  // namespace dpinfer::io

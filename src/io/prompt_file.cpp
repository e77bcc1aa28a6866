#include "dpinfer/io/prompt_file.h"

#include "dpinfer/io/lora_ref.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "prompt_columns.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

using prompt_columns::fail_at_line;
using prompt_columns::read_image_paths;

using nlohmann::json;

const char* const kAllowedKeys =
    "prompt, negative_prompt, seed, steps, guidance_scale, width, height, num_images, id, image, strength, mask, settings, "
    "loras";

/// `s` ends with `suffix`, ignoring ASCII case (".JSONL" is JSON lines too).
bool ends_with_ignoring_case(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
  return true;
}

/// PNG text chunks cannot hold a NUL (it ends the keyword), so neither can a prompt.
void check_no_nul(const std::string& text, const std::string& what, const std::string& name, int line) {
  if (text.find('\0') != std::string::npos)
    fail_at_line(name, line, what + " contains a NUL character, which a PNG's text chunk cannot hold; remove it");
}

template <typename T>
T get_integer(const json& v, const std::string& key, const std::string& name, int line, IntRange range) {
  if (!v.is_number_integer()) fail_at_line(name, line, quote(key) + " must be an integer, got " + json_brief(v));
  // An unsigned value past the range's max (up to 2^64-1) is compared as unsigned.
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= static_cast<uint64_t>(range.max) &&
                                  range.contains(static_cast<long long>(v.get<uint64_t>()))
                            : range.contains(v.get<int64_t>());
  if (!in_range) fail_at_line(name, line, quote(key) + " must be in " + range.text() + ", got " + json_brief(v));
  return static_cast<T>(v.get<int64_t>());
}

std::string get_string(const json& v, const std::string& key, const std::string& name, int line) {
  if (!v.is_string()) fail_at_line(name, line, quote(key) + " must be a string, got " + json_brief(v));
  return v.get<std::string>();
}

}  // namespace

void prompt_columns::read_image_paths(const json& v, PromptSpec& s, const std::function<void(const std::string&)>& fail) {
  const auto refuse = [&](const std::string& what) {
    fail(what);
    throw InputError("'image' " + what);  // fail() throws; this keeps the promise if it did not
  };
  if (v.is_array() && (v.empty() || v.size() > static_cast<size_t>(kImagesPerItemRange.max)))
    refuse("lists " + std::to_string(v.size()) + " images; expected a path, or a list of " + kImagesPerItemRange.text() +
           " paths");
  for (size_t i = 0; i < (v.is_array() ? v.size() : 1); ++i) {
    const json& entry = v.is_array() ? v[i] : v;
    if (!entry.is_string()) refuse("must be a path or a list of paths, got " + json_brief(entry));
    const std::string path = entry.get<std::string>();
    if (path.empty()) refuse("must be a path to a PNG, JPEG or WebP file, got \"\"");
    if (path.find('\0') != std::string::npos)
      refuse("contains a NUL character, which a PNG's text chunk cannot hold; remove it");
    if (i == 0) s.image = path;
    else s.more_images.push_back(path);
  }
}

namespace {

PromptSpec parse_json_line(const std::string& text, const std::string& name, int line,
                           const PromptFileOptions& options) {
  json obj;
  // JSON allows a key twice and nlohmann keeps the last; in a prompts file that is a
  // mistake ({"prompt": "a", ..., "prompt": "b"}), so the parse refuses it.
  try {
    obj = parse_json_text(text, JsonDialect::kStrict, /*unique_keys=*/true);
  } catch (const JsonDuplicateKey& e) {
    fail_at_line(name, line, "key " + quote(e.key(), 60) + " appears twice; keep one");
  } catch (const JsonSyntaxError& e) {
    fail_at_line(name, line, std::string("invalid JSON (") + e.what() +
                         "); each line must be one object such as {\"prompt\": \"a red fox\"}");
  }
  if (!obj.is_object())
    fail_at_line(name, line, "expected a JSON object such as {\"prompt\": \"a red fox\"}, got " + json_brief(obj));
  PromptSpec s;
  s.line = line;
  if (!obj.contains("prompt")) fail_at_line(name, line, "missing the required key 'prompt'");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "prompt") s.prompt = get_string(v, k, name, line);
    else if (k == "negative_prompt") {
      s.negative_prompt = get_string(v, k, name, line);
      check_no_nul(*s.negative_prompt, "'negative_prompt'", name, line);
    }
    else if (k == "id") s.id = v.is_string() ? v.get<std::string>() : v.is_number_integer() ? v.dump() : get_string(v, k, name, line);
    else if (k == "seed") s.seed = get_integer<int64_t>(v, k, name, line, {0, std::numeric_limits<int64_t>::max()});
    else if (k == "steps") s.steps = get_integer<int>(v, k, name, line, kStepsRange);
    else if (k == "width") s.width = get_integer<int>(v, k, name, line, kImageSizeRange);
    else if (k == "height") s.height = get_integer<int>(v, k, name, line, kImageSizeRange);
    else if (k == "num_images") s.num_images = get_integer<int>(v, k, name, line, kImagesPerLineRange);
    else if (k == "settings") {
      if (!v.is_object())
        fail_at_line(name, line, "'settings' must be an object such as {\"clip_skip\": 1}, got " + json_brief(v));
      s.settings = v;
    }
    else if (k == "loras") {
      try {
        s.loras = lora_set_from_json(v, "line " + std::to_string(line));
      } catch (const InputError& e) {
        fail_at_line(name, line, std::string(e.what()).substr(("line " + std::to_string(line) + ": ").size()));
      }
    }
    else if (k == "guidance_scale") {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        fail_at_line(name, line, "'guidance_scale' must be a finite number, got " + json_brief(v));
      s.guidance_scale = v.get<double>();
    } else if (k == "image") {
      read_image_paths(v, s, [&](const std::string& what) { fail_at_line(name, line, "'image' " + what); });
    } else if (k == "mask") {
      s.mask = get_string(v, k, name, line);
      if (s.mask->empty()) fail_at_line(name, line, "'mask' must be a path to a PNG, JPEG or WebP file, got \"\"");
      check_no_nul(*s.mask, "'mask'", name, line);
    } else if (k == "strength") {
      if (!v.is_number() || !(v.get<double>() > kStrengthMin && v.get<double>() <= kStrengthMax))
        fail_at_line(name, line, "'strength' must be a number in (0, 1], got " + json_brief(v));
      s.strength = v.get<double>();
    } else if (options.keep_fields) {
      if (options.reserved_field && options.reserved_field(k))
        fail_at_line(name, line, "key " + quote(k, 60) + " is one that dpinfer writes in each image's record itself, so "
                         "--keep-fields cannot keep it; rename it");
      s.fields[k] = v;
    } else {
      fail_at_line(name, line, "unknown key " + quote(k, 60) + "; allowed: " + kAllowedKeys +
                           " (--keep-fields keeps unknown keys)");
    }
  }
  check_no_nul(s.prompt, "'prompt'", name, line);
  // Image j of this line gets seed + j: keep the last one a valid seed (a line that sets no
  // num_images is checked with the run's --num-images, by plan::ItemList).
  if (s.seed && s.num_images && *s.seed > std::numeric_limits<int64_t>::max() - (*s.num_images - 1))
    fail_at_line(name, line, "'seed' + num_images - 1 must stay below 2^63; lower the seed");
  return s;
}

/// A .txt line: nullopt for a comment, else the prompt, with the `\#` escape undone.
std::optional<std::string> text_prompt(std::string text) {
  const size_t first = text.find_first_not_of(" \t");
  if (text[first] == '#') return std::nullopt;
  if (text[first] == '\\') {
    const size_t after = text.find_first_not_of('\\', first);
    if (after != std::string::npos && text[after] == '#') text.erase(first, 1);
  }
  return text;
}

std::string read_stdin() {
  std::string content;
  std::string chunk(65536, '\0');
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(std::string("cannot read the prompts from stdin: ") + std::strerror(errno));
    if (n == 0) return content;
    content.append(chunk.data(), static_cast<size_t>(n));
    if (content.size() > kMaxPromptFileBytes)
      throw InputError("the prompts on stdin are more than " + std::to_string(kMaxPromptFileBytes) +
                       " bytes, the limit; split them into several files");
  }
}

}  // namespace

PromptFormat prompt_format_of(const std::string& path, bool jsonl_stdin) {
  if (path == "-") return jsonl_stdin ? PromptFormat::kJsonl : PromptFormat::kText;
  if (ends_with_ignoring_case(path, ".jsonl")) return PromptFormat::kJsonl;
  if (ends_with_ignoring_case(path, ".csv")) return PromptFormat::kCsv;
  if (ends_with_ignoring_case(path, ".tsv")) return PromptFormat::kTsv;
  if (ends_with_ignoring_case(path, ".parquet")) return PromptFormat::kParquet;
  return PromptFormat::kText;
}

std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, bool jsonl) {
  return parse_prompts(content, name, jsonl ? PromptFormat::kJsonl : PromptFormat::kText, {});
}

std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, PromptFormat format,
                                      const PromptFileOptions& options) {
  if (content.size() > kMaxPromptFileBytes)
    throw InputError(quote(name) + " is " + std::to_string(content.size()) + " bytes, more than the limit of " +
                     std::to_string(kMaxPromptFileBytes) + "; split it into several files");
  if (format == PromptFormat::kParquet)
    throw InputError(quote(name) + ": parquet prompts are read from a file (read_prompt_parquet), not from text");
  if (format == PromptFormat::kCsv || format == PromptFormat::kTsv)
    return parse_prompt_table(content, name, format == PromptFormat::kCsv ? ',' : '\t', options);
  const bool jsonl = format == PromptFormat::kJsonl;
  std::vector<PromptSpec> out;
  size_t pos = 0;
  if (content.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // UTF-8 BOM
  int line = 0;  // at most kMaxPromptFileBytes + 1 lines: an int
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    std::string text = content.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? content.size() : nl + 1;
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    std::optional<std::string> prompt;
    if (!jsonl && !(prompt = text_prompt(text))) continue;  // a comment
    size_t bad = find_invalid_utf8(text);
    if (bad != std::string::npos)
      fail_at_line(name, line, "invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line; save the file as UTF-8");
    if (jsonl) {
      out.push_back(parse_json_line(text, name, line, options));
    } else {
      check_no_nul(*prompt, "the prompt", name, line);
      PromptSpec s;
      s.line = line;
      s.prompt = std::move(*prompt);
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::vector<PromptSpec> read_prompt_file(const std::string& path, bool jsonl_stdin) {
  PromptFileOptions options;
  options.jsonl_stdin = jsonl_stdin;
  return read_prompt_file(path, options);
}

std::vector<PromptSpec> read_prompt_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code entry_ec;  // a dangling or looping link is no prompt file: skipped
    if (name.size() > 4 && name[0] != '.' && ends_with_ignoring_case(name, ".txt") && e.is_regular_file(entry_ec))
      names.push_back(name);
  }
  if (ec) throw InputError("cannot list the prompts folder " + quote(dir) + ": " + ec.message());
  if (names.empty())
    throw InputError("the prompts folder " + quote(dir) + " holds no .txt file; give a folder of one prompt per .txt file "
                     "(as DPG-Bench's prompts/), a folder of .parquet files (a Hugging Face datasets folder), or a "
                     "prompts file");
  std::sort(names.begin(), names.end());
  std::vector<PromptSpec> out;
  for (const std::string& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    std::string text, why;
    if (read_whole_file(path, kMaxPromptFileBytes, &text, &why) != ReadStatus::kOk)
      throw InputError("cannot read prompt file " + quote(path) + ": " + why);
    if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (text.empty()) throw InputError("prompt file " + quote(path) + " is empty; write its prompt in it, or remove it");
    if (const size_t bad = find_invalid_utf8(text); bad != std::string::npos)
      throw InputError("prompt file " + quote(path) + ": invalid UTF-8 at byte " + std::to_string(bad + 1) +
                       "; save it as UTF-8");
    if (text.find('\0') != std::string::npos)
      throw InputError("prompt file " + quote(path) + " contains a NUL character, which a PNG's text chunk cannot "
                       "hold; remove it");
    PromptSpec s;
    s.line = static_cast<int>(out.size()) + 1;
    s.prompt = std::move(text);
    s.id = name.substr(0, name.size() - 4);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<PromptSpec> read_prompt_file(const std::string& path, const PromptFileOptions& options) {
  const PromptFormat format = prompt_format_of(path, options.jsonl_stdin);
  if (path == "-") return parse_prompts(read_stdin(), "<stdin>", format, options);
  std::error_code dir_ec;
  if (std::filesystem::is_directory(path, dir_ec)) {
    // A folder of .txt prompts (DPG-Bench's), else of parquet files (a datasets folder).
    for (const auto& e : std::filesystem::directory_iterator(path, dir_ec)) {
      const std::string name = e.path().filename().string();
      std::error_code entry_ec;
      if (name.size() > 4 && name[0] != '.' && ends_with_ignoring_case(name, ".txt") && e.is_regular_file(entry_ec))
        return read_prompt_folder(path);
    }
    if (!parquet_files_in(path).empty()) return read_prompt_parquet_folder(path, options);
    return read_prompt_folder(path);  // says what the folder lacks
  }
  if (format == PromptFormat::kParquet) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      throw InputError("cannot read prompts file " + quote(path) + ": " + open_error_text(path, ENOENT));
    return read_prompt_parquet(path, options);
  }
  std::string content, why;
  switch (read_whole_file(path, kMaxPromptFileBytes, &content, &why)) {
    case ReadStatus::kOk:
      break;
    case ReadStatus::kIsDirectory:
      throw InputError("prompts file " + quote(path) + " is a directory; give a .txt, .jsonl, .csv or .tsv file");
    case ReadStatus::kTooLarge:
      throw InputError("prompts file " + quote(path) + " is " + why + "; split it into several files");
    default:
      throw InputError("cannot read prompts file " + quote(path) + ": " + why);
  }
  return parse_prompts(content, path, format, options);
}

}  // namespace dpinfer::io

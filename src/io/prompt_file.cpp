#include "dpinfer/io/prompt_file.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"

namespace dpinfer::io {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& name, int line, const std::string& what) {
  throw InputError("'" + name + "' line " + std::to_string(line) + ": " + what);
}

/// `s` ends with `suffix`, ignoring ASCII case (".JSONL" is JSON lines too).
bool ends_with(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
  return true;
}

/// PNG text chunks cannot hold a NUL (it ends the keyword), so neither can a prompt.
void check_no_nul(const std::string& text, const std::string& what, const std::string& name, int line) {
  if (text.find('\0') != std::string::npos)
    fail(name, line, what + " contains a NUL character, which a PNG's text chunk cannot hold; remove it");
}

template <typename T>
T get_integer(const json& v, const std::string& key, const std::string& name, int line, long long min, long long max) {
  if (!v.is_number_integer())
    fail(name, line, "'" + key + "' must be an integer, got " + v.dump());
  long long x = v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(max)
                    ? max + 1
                    : v.get<long long>();
  if (x < min || x > max)
    fail(name, line, "'" + key + "' must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " + v.dump());
  return static_cast<T>(x);
}

std::string get_string(const json& v, const std::string& key, const std::string& name, int line) {
  if (!v.is_string()) fail(name, line, "'" + key + "' must be a string, got " + v.dump());
  return v.get<std::string>();
}

PromptSpec parse_json_line(const std::string& text, const std::string& name, int line) {
  json obj;
  // JSON allows a key twice and nlohmann keeps the last; in a prompts file that is a
  // mistake ({"prompt": "a", ..., "prompt": "b"}), so the parser's callback looks out for it.
  std::vector<std::set<std::string>> keys;  // per open object
  std::string duplicate;
  auto watch = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    obj = json::parse(text, watch);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number such as 1e999
    std::string why = e.what();
    auto colon = why.rfind(": ");
    fail(name, line, "invalid JSON (" + (colon == std::string::npos ? why : why.substr(colon + 2)) +
                         "); each line must be one object such as {\"prompt\": \"a red fox\"}");
  }
  if (!obj.is_object()) fail(name, line, "expected a JSON object such as {\"prompt\": \"a red fox\"}, got " + obj.dump());
  if (!duplicate.empty()) fail(name, line, "key '" + duplicate + "' appears twice; keep one");
  PromptSpec s;
  s.line = line;
  if (!obj.contains("prompt")) fail(name, line, "missing the required key 'prompt'");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "prompt") s.prompt = get_string(v, k, name, line);
    else if (k == "negative_prompt") {
      s.negative_prompt = get_string(v, k, name, line);
      check_no_nul(*s.negative_prompt, "'negative_prompt'", name, line);
    }
    else if (k == "id") s.id = v.is_string() ? v.get<std::string>() : v.is_number_integer() ? v.dump() : get_string(v, k, name, line);
    else if (k == "seed") s.seed = get_integer<int64_t>(v, k, name, line, 0, std::numeric_limits<int64_t>::max());
    else if (k == "steps") s.steps = get_integer<int>(v, k, name, line, 1, 10000);
    else if (k == "width") s.width = get_integer<int>(v, k, name, line, 8, 16384);
    else if (k == "height") s.height = get_integer<int>(v, k, name, line, 8, 16384);
    else if (k == "num_images") s.num_images = get_integer<int>(v, k, name, line, 1, 100000);
    else if (k == "settings") {
      if (!v.is_object()) fail(name, line, "'settings' must be an object such as {\"clip_skip\": 1}, got " + v.dump());
      s.settings = v;
    }
    else if (k == "guidance_scale") {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        fail(name, line, "'guidance_scale' must be a finite number, got " + v.dump());
      s.guidance_scale = v.get<double>();
    } else {
      fail(name, line, "unknown key '" + k +
                           "'; allowed: prompt, negative_prompt, seed, steps, guidance_scale, width, height, "
                           "num_images, id, settings");
    }
  }
  check_no_nul(s.prompt, "'prompt'", name, line);
  // Image j of this line gets seed + j: keep the last one a valid seed.
  if (s.seed && *s.seed > std::numeric_limits<int64_t>::max() - (s.num_images - 1))
    fail(name, line, "'seed' + num_images - 1 must stay below 2^63; lower the seed");
  return s;
}

}  // namespace

std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, bool jsonl) {
  std::vector<PromptSpec> out;
  size_t pos = 0;
  if (content.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // UTF-8 BOM
  int line = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    std::string text = content.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? content.size() : nl + 1;
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    size_t bad = find_invalid_utf8(text);
    if (bad != std::string::npos)
      fail(name, line, "invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line; save the file as UTF-8");
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    if (jsonl) {
      out.push_back(parse_json_line(text, name, line));
    } else {
      check_no_nul(text, "the prompt", name, line);
      PromptSpec s;
      s.line = line;
      s.prompt = text;
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::vector<PromptSpec> read_prompt_file(const std::string& path, bool jsonl_stdin) {
  std::string content;
  if (path == "-") {
    content.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return parse_prompts(content, "<stdin>", jsonl_stdin);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError("prompts file '" + path + "' is a directory; give a .txt or .jsonl file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read prompts file '" + path + "': no such file or not readable");
  content.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return parse_prompts(content, path, ends_with(path, ".jsonl"));
}

}  // namespace dpinfer::io

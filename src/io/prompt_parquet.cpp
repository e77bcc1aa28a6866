// Parquet prompts (io/prompt_file.h, read_prompt_parquet and read_prompt_parquet_folder): a
// parquet file, or a Hugging Face `datasets` folder of them, read through io/parquet.h, with the
// columns of a CSV prompts file (io/prompt_table.cpp) and the types parquet gives them.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "dpinfer/io/parquet.h"
#include "dpinfer/io/prompt_file.h"
#include "prompt_columns.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

namespace fs = std::filesystem;
using Type = ParquetColumn::Type;
using nlohmann::json;

/// pandas' to_parquet writes a DataFrame's index that is not a plain range as a column of this name.
bool is_pandas_index(const std::string& c) { return c.rfind("__index_level_", 0) == 0; }

[[noreturn]] void fail(const std::string& name, int64_t row, const std::string& column, const std::string& what) {
  throw InputError(quote(name) + " row " + std::to_string(row) + ", column " + quote(column, 60) + ": " + what);
}

/// Arrow's type name carries the file's nested field names, which may hold any byte: printable() keeps the
/// message one bounded line.
std::string type_text(const ParquetColumn& c) { return "a column of " + printable(c.arrow_type, 120); }

/// Row `r` of `c` as an integer in `range`; nullopt for a null (or an empty string).
std::optional<long long> parquet_integer(const ParquetColumn& c, size_t r, const std::string& name, IntRange range) {
  if (!c.valid[r]) return std::nullopt;
  long long v = 0;
  if (c.type == Type::kInt64) {
    v = c.ints[r];
  } else if (c.type == Type::kDouble) {
    // pandas stores an integer column with missing values as float64, NaN for the missing.
    const double d = c.doubles[r];
    if (std::isnan(d)) return std::nullopt;
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
      fail(name, static_cast<int64_t>(r), c.name, "must be an integer, got " + std::to_string(d));
    v = static_cast<long long>(d);
  } else if (c.type == Type::kString) {
    const std::string& s = c.strings[r];
    if (s.empty()) return std::nullopt;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size())
      fail(name, static_cast<int64_t>(r), c.name, "must be an integer, got " + quote(s, 60));
  } else {
    fail(name, static_cast<int64_t>(r), c.name, "must hold integers, but it is " + type_text(c));
  }
  if (!range.contains(v))
    fail(name, static_cast<int64_t>(r), c.name, "must be in " + range.text() + ", got " + std::to_string(v));
  return v;
}

std::optional<double> parquet_number(const ParquetColumn& c, size_t r, const std::string& name) {
  if (!c.valid[r]) return std::nullopt;
  double v = 0;
  if (c.type == Type::kInt64) v = static_cast<double>(c.ints[r]);
  else if (c.type == Type::kDouble) {
    v = c.doubles[r];
    if (std::isnan(v)) return std::nullopt;
  } else if (c.type == Type::kString) {
    const std::string& s = c.strings[r];
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) fail(name, static_cast<int64_t>(r), c.name, "must be a number, got " + quote(s, 60));
  } else {
    fail(name, static_cast<int64_t>(r), c.name, "must hold numbers, but it is " + type_text(c));
  }
  if (!std::isfinite(v)) fail(name, static_cast<int64_t>(r), c.name, "must be a finite number, got " + std::to_string(v));
  return v;
}

/// A text cell: checked as a CSV cell is (UTF-8, no NUL).
std::optional<std::string> cell_text(const ParquetColumn& c, size_t r, const std::string& name, bool integers_too) {
  if (!c.valid[r]) return std::nullopt;
  if (integers_too && c.type == Type::kInt64) return std::to_string(c.ints[r]);
  if (c.type != Type::kString)
    fail(name, static_cast<int64_t>(r), c.name, std::string("must hold strings") + (integers_too ? " or integers" : "") +
                                                    ", but it is " + type_text(c));
  const std::string& s = c.strings[r];
  if (const size_t bad = find_invalid_utf8(s); bad != std::string::npos)
    fail(name, static_cast<int64_t>(r), c.name, "is not valid UTF-8 at byte " + std::to_string(bad + 1));
  if (s.find('\0') != std::string::npos)
    fail(name, static_cast<int64_t>(r), c.name, "contains a NUL character, which a PNG's text chunk cannot hold; remove it");
  return s;
}

/// A kept column's cell as JSON (--keep-fields).
json cell_json(const ParquetColumn& c, size_t r, const std::string& name) {
  if (!c.valid[r]) return nullptr;
  switch (c.type) {
    case Type::kString: return *cell_text(c, r, name, false);
    case Type::kInt64: return c.ints[r];
    case Type::kBool: return c.ints[r] != 0;
    case Type::kDouble: return std::isfinite(c.doubles[r]) ? json(c.doubles[r]) : json(nullptr);
    case Type::kJson: return json::parse(c.strings[r], nullptr, /*allow_exceptions=*/false);
    case Type::kOther: break;
  }
  fail(name, static_cast<int64_t>(r), c.name,
       "is " + type_text(c) + ", which a record cannot keep (--keep-fields keeps strings, numbers, booleans, lists "
       "and structs); drop the column, or cast it to a string");
}

/// `path`'s prompts; `first_line` is the `line` of its row 0 (a folder's later files go on from the
/// earlier ones).
std::vector<PromptSpec> parquet_prompts(const std::string& path, const PromptFileOptions& options, int64_t first_line) {
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(path, ec);
  if (!ec && bytes > kMaxPromptFileBytes)
    throw InputError("prompts file " + quote(path) + " is " + std::to_string(bytes) + " bytes, more than the limit of " +
                     std::to_string(kMaxPromptFileBytes) + "; split it into several files");
  const ParquetTable t = read_parquet(path);
  const ParquetColumn* prompt = nullptr;
  std::string columns;
  for (const ParquetColumn& c : t.columns) {
    if (c.name == options.prompt_column) prompt = &c;
    columns += (columns.empty() ? "" : ", ") + quote(c.name, 40);
  }
  if (!prompt)
    throw InputError(quote(path) + ": no column " + quote(options.prompt_column, 60) + " for the prompt (it has " +
                     columns + "); name the prompt's column with --prompt-column");
  for (const ParquetColumn& c : t.columns) {
    if (&c == prompt || prompt_columns::is_known(c.name) || is_pandas_index(c.name)) continue;
    if (!options.keep_fields)
      throw InputError(quote(path) + ": unknown column " + quote(c.name, 60) + "; the prompt is in column " +
                       quote(options.prompt_column, 60) + " (--prompt-column), and the others may be " + prompt_columns::kKnown +
                       " (--keep-fields keeps unknown columns)");
    if (options.reserved_field && options.reserved_field(c.name))
      throw InputError(quote(path) + ": column " + quote(c.name, 60) +
                       " is one that dpinfer writes in each image's record itself, so --keep-fields cannot keep it; "
                       "rename it");
  }
  if (first_line + t.rows > std::numeric_limits<int>::max())
    throw InputError(quote(path) + ": more than 2^31 rows in all; split the prompts");
  std::vector<PromptSpec> out;
  out.reserve(static_cast<size_t>(t.rows));
  for (size_t r = 0; r < static_cast<size_t>(t.rows); ++r) {
    PromptSpec s;
    s.line = static_cast<int>(first_line + static_cast<int64_t>(r));
    const std::optional<std::string> text = cell_text(*prompt, r, path, false);
    if (!text) fail(path, static_cast<int64_t>(r), prompt->name, "is null; give every row a prompt (an empty one is \"\")");
    s.prompt = *text;
    for (const ParquetColumn& c : t.columns) {
      if (&c == prompt || is_pandas_index(c.name)) continue;
      const std::string& col = c.name;
      if (!prompt_columns::is_known(col)) {
        s.fields[col] = cell_json(c, r, path);
        continue;
      }
      if (col == "negative_prompt") s.negative_prompt = cell_text(c, r, path, false);
      else if (col == "id") s.id = cell_text(c, r, path, true);
      else if (col == "seed") {
        if (auto v = parquet_integer(c, r, path, {0, std::numeric_limits<long long>::max()})) s.seed = *v;
      } else if (col == "steps") {
        if (auto v = parquet_integer(c, r, path, kStepsRange)) s.steps = static_cast<int>(*v);
      } else if (col == "width") {
        if (auto v = parquet_integer(c, r, path, kImageSizeRange)) s.width = static_cast<int>(*v);
      } else if (col == "height") {
        if (auto v = parquet_integer(c, r, path, kImageSizeRange)) s.height = static_cast<int>(*v);
      } else if (col == "num_images") {
        if (auto v = parquet_integer(c, r, path, kImagesPerLineRange)) s.num_images = static_cast<int>(*v);
      } else if (col == "guidance_scale") {
        s.guidance_scale = parquet_number(c, r, path);
      } else if (col == "image" && c.type == Type::kJson) {
        // A list of paths (list<string>): several references, as a .jsonl line's `image` list.
        if (c.valid[r])
          prompt_columns::read_image_paths(cell_json(c, r, path), s, [&](const std::string& what) {
            fail(path, static_cast<int64_t>(r), col, what);
          });
      } else if (col == "image") {
        s.image = cell_text(c, r, path, false);
      } else if (col == "mask") {
        s.mask = cell_text(c, r, path, false);
      } else if (col == "strength") {
        s.strength = parquet_number(c, r, path);
        if (s.strength && !(*s.strength > kStrengthMin && *s.strength <= kStrengthMax))
          fail(path, static_cast<int64_t>(r), col, "must be a number in (0, 1], got " + std::to_string(*s.strength));
      }
    }
    if (s.seed && s.num_images && *s.seed > std::numeric_limits<int64_t>::max() - (*s.num_images - 1))
      fail(path, static_cast<int64_t>(r), "seed", "seed + num_images - 1 must stay below 2^63; lower the seed");
    out.push_back(std::move(s));
  }
  return out;
}

/// The split a path segment names by `datasets`' conventions ("train-00000-of-00002.parquet",
/// "test/", "validation.parquet"), or "".
std::string split_of_segment(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char*, const char*> kKeywords[] = {
      {"training", "train"},  {"train", "train"}, {"validation", "validation"}, {"valid", "validation"},
      {"val", "validation"},  {"dev", "validation"}, {"testing", "test"},      {"evaluation", "test"},
      {"eval", "test"},       {"test", "test"}};
  for (const auto& [word, split] : kKeywords) {
    const size_t n = std::char_traits<char>::length(word);
    if (s.compare(0, n, word) != 0) continue;
    if (s.size() == n || std::string("-._ 0123456789").find(s[n]) != std::string::npos) return split;
  }
  return "";
}

}  // namespace

std::vector<PromptSpec> read_prompt_parquet(const std::string& path, const PromptFileOptions& options) {
  return parquet_prompts(path, options, 1);
}

std::vector<std::string> parquet_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {  // .git, .cache, .huggingface: not the dataset
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    std::error_code entry_ec;
    if (it->is_regular_file(entry_ec) && it->path().extension() == ".parquet")
      files.push_back(fs::relative(it->path(), dir, entry_ec).string());
  }
  if (ec) throw InputError("cannot list the prompts folder " + quote(dir) + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<PromptSpec> read_prompt_parquet_folder(const std::string& dir, const PromptFileOptions& options) {
  const std::vector<std::string> files = parquet_files_in(dir);
  if (files.empty())
    throw InputError("the prompts folder " + quote(dir) + " holds no .parquet file and no .txt file; give a folder "
                     "of parquet files (a Hugging Face datasets folder), of one prompt per .txt file, or a prompts file");
  std::map<std::string, std::string> splits;  // split -> its first file
  for (const std::string& f : files)
    for (const auto& segment : fs::path(f))
      if (const std::string split = split_of_segment(segment.string()); !split.empty()) {
        splits.emplace(split, f);
        break;
      }
  if (splits.size() > 1) {
    std::string listed;
    for (const auto& [split, file] : splits) listed += (listed.empty() ? "" : ", ") + quote(split) + " (" + quote(file) + ")";
    throw InputError("the prompts folder " + quote(dir) + " holds several splits: " + listed +
                     "; give one split: its .parquet file, or a folder holding only its files");
  }
  std::vector<PromptSpec> out;
  for (const std::string& f : files) {
    std::vector<PromptSpec> part =
        parquet_prompts((fs::path(dir) / f).string(), options, static_cast<int64_t>(out.size()) + 1);
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}

}  // namespace dpinfer::io

#pragma once
// Prompt files: .txt (one prompt per line), .jsonl (one object per line), .csv / .tsv
// tables with a header row (io/prompt_table.cpp), and .parquet files and folders of them
// (io/prompt_parquet.cpp).

#include <cstdint>
#include <functional>
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
/// How many input images a line's `image` may list: the references of a model that edits several (FLUX.2). diffusers
/// sets no bound; this one bounds a line's work (each reference lengthens the denoiser's sequence by its tokens).
constexpr IntRange kImagesPerItemRange{1, 16};

/// An img2img strength: the share of the denoising schedule run from the noised input image.
constexpr double kStrengthMin = 0.0;  ///< exclusive: 0 would run no step
constexpr double kStrengthMax = 1.0;  ///< inclusive: 1 starts from pure noise (the image still sets nothing else)

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
  /// An img2img item's input image (issue 29): the path as written (the worker resolves a
  /// relative one against the prompts file's folder), and how much of it is repainted, in (0, 1].
  std::optional<std::string> image;
  /// A reference-editing model's second and later references, in order: `image` given as a list of paths
  /// ("image": ["a.png", "b.png"]), whose first is `image`. Empty for one image.
  std::vector<std::string> more_images;
  std::optional<double> strength;
  /// An inpainting item's mask (with an image): white is repainted, black kept, as diffusers reads it.
  std::optional<std::string> mask;
  /// The line's model settings ({"clip_skip": 1}): an object, checked against the model's
  /// family once it is loaded (the file knows nothing of models).
  std::optional<nlohmann::json> settings;
  /// The line's LoRAs ("loras": [{"path": ..., "scale": ...}]), instead of the run's; paths as
  /// written (the worker resolves them against the current directory).
  std::optional<LoraSet> loras;
  /// With --keep-fields: the line's keys (JSONL) or columns (CSV/TSV) that dpinfer does not
  /// know, as written (a CSV cell is a string), carried into each of its images' records.
  nlohmann::json fields = nlohmann::json::object();
};

enum class PromptFormat { kText, kJsonl, kCsv, kTsv, kParquet };

/// How a prompts file is read, beyond its content.
struct PromptFileOptions {
  bool jsonl_stdin = false;               ///< "-" holds JSONL (--jsonl)
  std::string prompt_column = "prompt";   ///< CSV/TSV: the column of the prompt (--prompt-column)
  bool keep_fields = false;               ///< unknown keys and columns kept, not refused (--keep-fields)
  /// A kept field may not have a name that dpinfer writes in a record itself
  /// (plan/record_fields.h); none when unset.
  std::function<bool(const std::string&)> reserved_field;
};

/// The format of `path` by its extension (ASCII case ignored): .jsonl, .csv, .tsv, .parquet,
/// else text; "-" is text, or JSONL with `jsonl_stdin`.
PromptFormat prompt_format_of(const std::string& path, bool jsonl_stdin);

/// Reads `path` ("-" is stdin), at most kMaxPromptFileBytes. `.jsonl` files hold objects
/// with the keys `prompt` (required), `negative_prompt`, `seed`, `steps`,
/// `guidance_scale`, `width`, `height`, `num_images`, `id`, `image` (an input image's path, or a list of up to
/// 16 references' paths), `strength`
/// (in (0, 1]), `mask` (an inpainting mask's path), `settings` (an object of
/// the model family's settings) and `loras` (io/lora_ref.h); anything else is a .txt
/// file: one prompt per line, UTF-8, CRLF and a BOM accepted, blank lines skipped, and a
/// line whose first non-blank character is `#` a comment. A prompt that starts with `#`
/// is written `\#`: when a .txt line's first non-blank characters are backslashes and
/// then `#`, one backslash is dropped (`\#tag` is the prompt `#tag`, `\\#tag` is `\#tag`).
/// Throws InputError naming the file and line for invalid UTF-8, bad JSON, an unknown key
/// or a bad value; every quoted value is escaped and cut short (util/strings.h).
/// CSV and TSV files: see parse_prompt_table. Parquet: see read_prompt_parquet. A directory: see
/// read_prompt_folder when it holds .txt files, else read_prompt_parquet_folder.
std::vector<PromptSpec> read_prompt_file(const std::string& path, const PromptFileOptions& options);

/// A folder of prompt files, as DPG-Bench publishes its prompts (dpg_bench/prompts/<id>.txt): each
/// `.txt` file directly in it (in byte order of the names; other files are not read) is one
/// prompt, its whole text with trailing blanks and newlines dropped, with the file's stem as its
/// `id`; `line` is the file's place in that order, from 1. Throws InputError naming the file for an
/// empty one, invalid UTF-8 or a NUL, and the folder when it holds no .txt file.
std::vector<PromptSpec> read_prompt_folder(const std::string& dir);
std::vector<PromptSpec> read_prompt_file(const std::string& path, bool jsonl_stdin = false);

/// A parquet file of prompts, read whole through io/parquet.h, with the columns of a CSV file
/// (parse_prompt_table): the prompt in `options.prompt_column` (strings), and negative_prompt and id
/// (strings; id also integers), seed, steps, width, height and num_images (integers, or floats of
/// integral value as pandas stores an integer column with gaps, or strings of integers),
/// guidance_scale (numbers); a null leaves its value unset. Other columns are refused, or kept with
/// `options.keep_fields` as JSON: strings, numbers, booleans, lists and structs. pandas' index
/// columns (`__index_level_0__`) are skipped. `line` is the row's index + 1. Throws InputError naming
/// the file, the row (from 0, as pandas and datasets count) and the column for a missing column, a
/// null prompt or a bad value, and naming the file for one that is not parquet.
std::vector<PromptSpec> read_prompt_parquet(const std::string& path, const PromptFileOptions& options);

/// A Hugging Face `datasets` folder of parquet files (data/train-00000-of-00002.parquet, ...): every
/// .parquet file under `dir`, hidden folders skipped, read by read_prompt_parquet in byte order of
/// their paths, as one table (`line` goes on from file to file). Throws InputError when the files
/// belong to several splits (named by `datasets`' conventions: train, validation, test), naming
/// them: give one split's file or folder.
std::vector<PromptSpec> read_prompt_parquet_folder(const std::string& dir, const PromptFileOptions& options);

/// The .parquet files under `dir` (relative paths, sorted), hidden folders skipped.
std::vector<std::string> parquet_files_in(const std::string& dir);

/// Parses already-read content (see read_prompt_file); `name` is used in messages.
std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, PromptFormat format,
                                      const PromptFileOptions& options);
std::vector<PromptSpec> parse_prompts(const std::string& content, const std::string& name, bool jsonl);

/// A CSV (RFC 4180, as Python's csv module and pandas write it) or TSV table: a header row
/// naming the columns, then one prompt per row. The prompt is in the column
/// `options.prompt_column`; the columns negative_prompt, seed, steps, guidance_scale, width,
/// height, num_images, id, image, strength and mask are read as in a .jsonl line, and an empty cell leaves its
/// value unset. Any other column is refused, or kept with `options.keep_fields`. Quoted
/// cells may hold the delimiter, `""` and newlines; CRLF and a UTF-8 BOM are accepted;
/// blank rows are skipped. A row's line is that of its first character. Throws InputError
/// naming the file, the line and the column for a ragged row, bad quoting, a missing or
/// repeated column, or a bad value. Read as Python's csv module reads (io/prompt_table.cpp).
std::vector<PromptSpec> parse_prompt_table(const std::string& content, const std::string& name, char delimiter,
                                           const PromptFileOptions& options);

}  // namespace dpinfer::io

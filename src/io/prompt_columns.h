#pragma once
// What the prompt-file readers share (prompt_file.cpp for .txt/.jsonl, prompt_table.cpp for CSV/TSV,
// prompt_parquet.cpp for parquet): the columns a table may carry besides the prompt's, and the
// error that names a file and a line. Private to src/io.

#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "dpinfer/io/prompt_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io::prompt_columns {

/// The columns a CSV/TSV table or a parquet file may have besides the prompt's, read as a .jsonl
/// line's keys of the same names.
inline constexpr const char* kKnown =
    "negative_prompt, seed, steps, guidance_scale, width, height, num_images, id, image, strength, mask";

inline bool is_known(const std::string& c) {
  for (const char* k : {"negative_prompt", "seed", "steps", "guidance_scale", "width", "height", "num_images", "id",
                        "image", "strength", "mask"})
    if (c == k) return true;
  return false;
}

/// An `image` value as JSON (a .jsonl line's key, a parquet list column's cell): a path, or a list of
/// kImagesPerItemRange paths (the references of a model that edits several, FLUX.2), the first into `s.image` and
/// the others into `s.more_images`. `fail` throws InputError with what is wrong ("lists 0 images; ...", without the
/// key's name); it must not return. Defined in prompt_file.cpp.
void read_image_paths(const nlohmann::json& v, PromptSpec& s, const std::function<void(const std::string&)>& fail);

/// InputError "'NAME' line LINE: WHAT".
[[noreturn]] inline void fail_at_line(const std::string& name, int line, const std::string& what) {
  throw InputError(quote(name) + " line " + std::to_string(line) + ": " + what);
}

}  // namespace dpinfer::io::prompt_columns

#pragma once
// What the prompt-file readers share (prompt_file.cpp for .txt/.jsonl, prompt_table.cpp for CSV/TSV,
// prompt_parquet.cpp for parquet): the columns a table may carry besides the prompt's, and the
// error that names a file and a line. Private to src/io.

#include <string>

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

/// InputError "'NAME' line LINE: WHAT".
[[noreturn]] inline void fail_at_line(const std::string& name, int line, const std::string& what) {
  throw InputError(quote(name) + " line " + std::to_string(line) + ": " + what);
}

}  // namespace dpinfer::io::prompt_columns

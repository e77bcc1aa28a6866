#pragma once
// Hugging Face `datasets.load_dataset("imagefolder", data_dir=OUT)`'s rule for the
// columns of metadata.jsonl, as datasets 4.8.5 applies it (packaged_modules/
// folder_based_builder/folder_based_builder.py, _set_feature and _generate_examples):
// "file_name" (a string) becomes the picture column "image"; "X_file_name" becomes a
// picture column "X", and "file_names" / "X_file_names" list columns "images" / "X".
// A metadata column of the same name as a picture column replaces it: an integer
// "image" column left the dataset with no picture at all (issue 11, item 11).
// tools/fixtures/check_imagefolder.py checks the same with the real library.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpinfer::test {

/// What keeps `row` (one metadata.jsonl object) from loading as exactly one picture
/// plus its other columns; empty when nothing does.
inline std::vector<std::string> imagefolder_clashes(const nlohmann::json& row) {
  std::vector<std::string> out;
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (!row.is_object()) return {"not a JSON object"};
  if (!row.contains("file_name") || !row["file_name"].is_string()) out.push_back("no string 'file_name'");
  for (const auto& [key, value] : row.items()) {
    if (key == "file_name") continue;
    if (key == "image" || key == "images")
      out.push_back("'" + key + "' is the name of imagefolder's picture column, which it would replace");
    else if (key == "file_names" || ends_with(key, "_file_name") || ends_with(key, "_file_names"))
      out.push_back("'" + key + "' would make another picture column");
  }
  return out;
}

}  // namespace dpinfer::test

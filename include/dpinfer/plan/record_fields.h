#pragma once
// The keys of an image's record (its manifest line, its metadata.jsonl row, and the
// "dpinfer" text of its PNG), which dpinfer writes itself (worker/image_metadata.cpp,
// worker/generate_run.cpp), and the names Hugging Face imagefolder reserves for picture
// columns. A field that --keep-fields carries from a prompts line may have none of them.

#include <string>

namespace dpinfer::plan {

/// True for a key dpinfer writes in every record, or that imagefolder reserves (`image`,
/// `file_name`, `file_names`, `*_file_name`, `*_file_names`). The model family's settings
/// (clip_skip, ...) are record keys too; the worker checks those once the model is loaded.
bool is_record_field(const std::string& key);

}  // namespace dpinfer::plan

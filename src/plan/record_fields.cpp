#include "dpinfer/plan/record_fields.h"

namespace dpinfer::plan {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_record_field(const std::string& key) {
  // item_record() and write_image()/record_failure() in the worker, and run_status's readers.
  for (const char* k : {"index", "file_name", "prompt", "negative_prompt", "seed", "seed_from", "steps",
                        "guidance_scale", "width", "height", "scheduler", "scheduler_settings", "vae_tiling",
                        "model", "model_revision", "model_hash", "line", "image_index", "loras", "lora_paths", "id",
                        "settings", "sampler", "dtype", "weight_storage", "attention_backend", "channels_last", "fp8_compute", "input_image", "input_image_hash", "strength", "input_mask",
                        "input_mask_hash",
                        "dpinfer_version", "rank", "seconds", "status",
                        "error",
                        "finished_at", "num_images",
                        // --layout webdataset: the record's key, and the parquet indexes' own columns
                        "key", "caption", "error_message",
                        // imagefolder's picture columns (datasets' folder_based_builder)
                        "image", "file_names"})
    if (key == k) return true;
  return ends_with(key, "_file_name") || ends_with(key, "_file_names");
}

}  // namespace dpinfer::plan

#pragma once
// Which safetensors files hold a component's weights, found as diffusers' and
// transformers' from_pretrained find them: sharded indexes, variants, and the
// pickled formats dpinfer refuses to read.

#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// The weight files of one component folder.
struct WeightFiles {
  std::vector<std::string> files;  ///< the safetensors files to load: one file, or the shards
  std::string index;               ///< the *.safetensors.index*.json read, or empty
  std::string variant;             ///< the variant the files are ("fp16"), or empty
};

/// Finds the weights in `component_dir` the way diffusers' and transformers' from_pretrained
/// do: first a sharded index, then a single file, named diffusion_pytorch_model[.variant] or
/// model[.variant]. An index (…safetensors.index[.variant].json, or the legacy
/// ….variant.safetensors.index.json) is validated: its weight_map must name existing shard
/// files inside the folder that hold exactly the tensors it lists. A non-empty `variant`
/// must be found, else the error lists the weight files that are there. Pickled weights
/// (.bin, .pt, .pth, .ckpt) are refused with an explanation and a conversion command.
/// Throws dpinfer::Error.
WeightFiles find_weight_files(const std::string& component_dir, const std::string& variant = "");

/// Whether `component_dir` has weight files of `variant` (safetensors or pickled), as
/// diffusers' pipeline loader decides which components load the variant.
bool has_weight_variant(const std::string& component_dir, const std::string& variant);

}  // namespace dpinfer::pipeline

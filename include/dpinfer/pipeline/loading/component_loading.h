#pragma once
// Loading one component of a resolved model directory into its module: what every
// family's load function does for each of its text encoders, denoisers and VAEs.

#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/model_dir.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// "fp32", "fp16" or "bf16" as a dtype. Throws InputError for anything else.
at::ScalarType parse_dtype(const std::string& dtype);

/// Builds `c` by its class (models/model_classes.h): first on the meta device, to check
/// its weight files' keys and shapes against the config without allocating anything
/// (a config that asks for a 40 GB model is refused here, not by the allocator), then
/// for real with `options` (uninitialised, in the run dtype, on the target device), into
/// which load_weights() copies each tensor once. Returns the module in eval mode.
/// Throws dpinfer::Error naming the component.
std::shared_ptr<torch::nn::Module> load_component(const Component& c, const at::TensorOptions& options,
                                                  const LoadOptions& load_options = {});

/// Whether load_component() keeps some of `c`'s weights stored rather than in the run dtype: in float8
/// (c.weight_storage, --weight-storage) or as a GGUF file's blocks (c.single_file a GGUF file). LoRAs then
/// stay unfused on its layers (loading/lora.h).
bool component_stores_weights(const Component& c);

/// What load_component() checks before it allocates anything: builds `c` on the meta device and
/// checks its weight files' keys and shapes against it. Returns that module of shapes (no values).
/// Throws dpinfer::Error naming the component.
std::shared_ptr<torch::nn::Module> check_component(const Component& c, const at::TensorOptions& options);

/// The key conversion of a component read from a single-file checkpoint (Component::single_file),
/// from its layout and config. Throws InputError for a config the layout cannot have.
KeyConverter single_file_converter(const Component& c);

/// The key renames `c` is loaded with: its class's `renames`, and for a component whose single-file
/// layout leaves a tensor to load_component() to fill, that tensor ignored (SD3's CLIP-L from a
/// Stability file: text_projection.weight, the identity diffusers gives it).
KeyRenames component_key_renames(const Component& c, const KeyRenames& renames);

/// load_component(), as the module type the caller expects.
template <typename Impl>
std::shared_ptr<Impl> load_component_as(const Component& c, const at::TensorOptions& options,
                                        const LoadOptions& load_options = {}) {
  return std::dynamic_pointer_cast<Impl>(load_component(c, options, load_options));
}

}  // namespace dpinfer::pipeline

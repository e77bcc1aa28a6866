#pragma once
// --weight-storage fp8: a component's Linear and Conv2d weights kept in float8 between uses
// and cast to the run dtype for each forward, chosen layer by layer exactly as diffusers'
// ModelMixin.enable_layerwise_casting chooses them (diffusers 0.36, hooks/layerwise_casting.py
// _apply_layerwise_casting), so that dpinfer computes with the very values diffusers does.

#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// diffusers' DEFAULT_SKIP_MODULES_PATTERN: layers under a module whose name matches one of
/// these (Python re.search on the dotted name) keep the run dtype. Norms and position or
/// patch embeddings condition every token, and proj_in / proj_out touch the model's input and
/// output directly.
const std::vector<std::string>& default_layerwise_skip_patterns();

/// The dotted names of the layers of `module` that layerwise casting stores: each Linear and
/// Conv2d (torch.nn's casting layers that dpinfer's models use) none of whose enclosing module
/// names, its own included, matches a pattern of default_layerwise_skip_patterns() or of
/// `class_patterns` (the class's _skip_layerwise_casting_patterns and _keep_in_fp32_modules;
/// models/model_classes.h). A skipped module is skipped whole, as diffusers' recursion stops
/// there: "transformer_blocks.0.norm1" keeps its Linear "transformer_blocks.0.norm1.linear".
/// Module names here are the checkpoint's, so they are diffusers' and transformers' own.
std::vector<std::string> layerwise_stored_layers(const torch::nn::Module& module,
                                                 const std::vector<std::string>& class_patterns);

/// Makes each layer of `names` (layerwise_stored_layers()) keep its weight and bias in
/// `storage`, computing in `compute` (nn::WeightedLayer::store_as). Call before load_weights(),
/// which then fills the float8 tensors through `compute` (LoadOptions::round_through), as
/// diffusers rounds a checkpoint to torch_dtype at load and only then to the storage dtype.
/// Returns the bytes of weights now stored.
int64_t store_layers(torch::nn::Module& module, const std::vector<std::string>& names, c10::ScalarType storage,
                     c10::ScalarType compute);

/// "fp8" or "fp8-denoiser" (the --weight-storage values that store anything) as the storage
/// dtype, float8_e4m3fn (diffusers' default storage_dtype); Undefined for "default" (or "").
/// Throws InputError for another value.
c10::ScalarType parse_weight_storage(const std::string& value);

}  // namespace dpinfer::pipeline

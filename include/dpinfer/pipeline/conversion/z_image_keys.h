#pragma once
// The key conversion of Z-Image transformers in their original layout (Tongyi-MAI's and ComfyUI's
// z_image_turbo_bf16.safetensors, the latter under "model.diffusion_model.") into the names of
// diffusers' ZImageTransformer2DModel, as diffusers 0.36.0's loaders/single_file_utils.py
// convert_z_image_transformer_checkpoint_to_diffusers converts them: x_embedder / final_layer into
// the patch-size slot of all_x_embedder / all_final_layer, attention.out -> attention.to_out.0,
// q_norm / k_norm -> norm_q / norm_k, and the fused attention.qkv read as three row ranges of the
// file. Names and shapes only; free of LibTorch, so it is fuzzed.

#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// The parts of `tensors` whose names start with `prefix` ("" or "model.diffusion_model."), under
/// ZImageTransformer2DModel's names; tensors outside `prefix` get none. `patch` is the module's
/// all_x_embedder / all_final_layer key, "<patch_size>-<f_patch_size>" of its config's first entry
/// ("2-1", the one diffusers' converter writes). A key the rules do not know keeps its name without
/// the prefix, for the strict loader to report as unexpected. Throws InputError (one line naming
/// the key) for a fused qkv whose rows do not split in three.
std::vector<TensorPart> convert_z_image_keys(const std::string& prefix, const std::string& patch,
                                             const std::vector<SourceTensor>& tensors);

}  // namespace dpinfer::pipeline

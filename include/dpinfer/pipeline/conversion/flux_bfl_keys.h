#pragma once
// The key conversion of FLUX.1 transformers as Black Forest Labs ship them (flux1-dev.safetensors,
// flux1-schnell.safetensors; ComfyUI saves the same keys under "model.diffusion_model.") into the
// names of diffusers' FluxTransformer2DModel, as diffusers 0.36.0's loaders/single_file_utils.py
// convert_flux_transformer_checkpoint_to_diffusers converts them: rename tables, fused q/k/v and
// q/k/v/mlp projections read as row ranges of the file, and the final AdaLN's (shift, scale) read
// as diffusers' (scale, shift) by two pieces of one module tensor (TensorPart::target_row). Chroma's
// files (chroma-unlocked-v*.safetensors) are the same layout without the modulations and guidance_in /
// time_in / vector_in, plus distilled_guidance_layer.* (convert_chroma_transformer_checkpoint_to_diffusers),
// into ChromaTransformer2DModel's names. Names and shapes only: no tensor is read here, and none is
// copied whole.

#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// What a BFL FLUX.1 transformer's keys say of its architecture.
struct FluxBflBlocks {
  int64_t double_blocks = 0;  ///< double_blocks.N: diffusers' num_layers (the highest N + 1)
  int64_t single_blocks = 0;  ///< single_blocks.N: num_single_layers
  bool guidance = false;      ///< guidance_in.*: guidance_embeds (FLUX.1-dev; schnell has none)
  int64_t approximator_layers = 0;  ///< distilled_guidance_layer.layers.N: Chroma's approximator_layers
};

/// Counts the blocks of the BFL transformer whose keys start with `prefix`, as
/// convert_flux_transformer_checkpoint_to_diffusers derives num_layers and num_single_layers
/// (and convert_chroma_transformer_checkpoint_to_diffusers num_guidance_layers).
FluxBflBlocks count_flux_bfl_blocks(const std::string& prefix, const std::vector<SourceTensor>& tensors);

/// The parts of `tensors` whose names start with `prefix` ("" or "model.diffusion_model."),
/// under FluxTransformer2DModel's (or ChromaTransformer2DModel's) names; tensors outside `prefix` get
/// none. `inner_dim` is the
/// model's num_attention_heads * attention_head_dim: single_blocks.N.linear1 holds q, k, v
/// (inner_dim rows each) and then the MLP's input projection (the rest). A key the rules do not
/// know keeps its name without the prefix, for the strict loader to report as unexpected.
/// Throws InputError (one line naming the key) for a tensor a rule needs of another shape: a
/// fused qkv whose rows do not split in three, a linear1 of at most 3 * inner_dim rows, a final
/// AdaLN whose rows do not split in two.
std::vector<TensorPart> convert_flux_bfl_keys(const std::string& prefix, int64_t inner_dim,
                                              const std::vector<SourceTensor>& tensors);

}  // namespace dpinfer::pipeline

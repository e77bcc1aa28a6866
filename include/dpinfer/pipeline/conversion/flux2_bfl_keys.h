#pragma once
// The key conversion of FLUX.2 transformers as Black Forest Labs ship them (flux2-dev.safetensors, the [klein]
// files; ComfyUI saves the same keys under "model.diffusion_model.", city96's GGUF files under none) into the names
// of diffusers' Flux2Transformer2DModel, as diffusers 0.37.0's loaders/single_file_utils.py
// convert_flux2_transformer_checkpoint_to_diffusers converts them: rename tables, a double block's fused q/k/v
// read as three row ranges of the file, a single block's fused q/k/v/MLP projection kept whole (diffusers'
// to_qkv_mlp_proj), and the final AdaLN's (shift, scale) read as diffusers' (scale, shift) by two pieces of one
// module tensor. Names and shapes only: no tensor is read here, and none is copied whole.

#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// What a BFL FLUX.2 transformer's keys say of its architecture.
struct Flux2BflShape {
  int64_t double_blocks = 0;        ///< double_blocks.N: diffusers' num_layers (the highest N + 1)
  int64_t single_blocks = 0;        ///< single_blocks.N: num_single_layers
  bool guidance = false;            ///< guidance_in.*: guidance_embeds ([dev]; [klein] has none)
  int64_t in_channels = 0;          ///< img_in.weight [width, in]: in_channels (0 when absent)
  int64_t joint_attention_dim = 0;  ///< txt_in.weight [width, joint]: joint_attention_dim (0 when absent)
};

/// The shape of the BFL FLUX.2 transformer whose keys start with `prefix`, as diffusers' converter and the
/// config it is given must agree on it.
Flux2BflShape flux2_bfl_shape(const std::string& prefix, const std::vector<SourceTensor>& tensors);

/// The parts of `tensors` whose names start with `prefix` ("" or "model.diffusion_model."), under
/// Flux2Transformer2DModel's names; tensors outside `prefix` get none. A key the rules do not know keeps its name
/// without the prefix, for the strict loader to report as unexpected. Throws InputError (one line naming the key)
/// for a fused qkv whose rows do not split in three, or a final AdaLN whose rows do not split in two.
std::vector<TensorPart> convert_flux2_bfl_keys(const std::string& prefix, const std::vector<SourceTensor>& tensors);

}  // namespace dpinfer::pipeline

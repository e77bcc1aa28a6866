#pragma once
// The key conversion of SD3 / SD3.5 MMDiT transformers as Stability AI ships them
// (sd3_medium*.safetensors, sd3.5_medium.safetensors, sd3.5_large.safetensors: the transformer under
// "model.diffusion_model.", beside the VAE and, in some files, the text encoders; a bare transformer
// file has no prefix) into the names of diffusers' SD3Transformer2DModel, as diffusers 0.36.0's
// loaders/single_file_utils.py convert_sd3_transformer_checkpoint_to_diffusers converts them:
// rename tables, the fused attn.qkv / attn2.qkv read as three row ranges of the file, and the
// (shift, scale) modulations of the final layer and of the last block's context_block (context_pre_only)
// read as diffusers' (scale, shift) by two pieces each (TensorPart::target_row). Names and shapes
// only; free of LibTorch, so it is fuzzed.

#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// What an SD3 / SD3.5 transformer's keys say of its architecture (the config fields
/// convert_sd3_transformer_checkpoint_to_diffusers and infer_diffusers_model_type derive).
struct Sd3Blocks {
  int64_t joint_blocks = 0;                   ///< joint_blocks.N: num_layers (the highest N + 1)
  std::vector<int64_t> dual_attention_layers;  ///< the N with x_block.attn2.* (SD3.5 medium's MMDiT-X), ascending
  bool qk_norm = false;                       ///< attn.ln_q.*: qk_norm "rms_norm" (SD3.5), else none (SD3)
  int64_t pos_embed_rows = 0;                 ///< pos_embed's [1, rows, width]: pos_embed_max_size squared
};

/// Reads the architecture of the SD3 transformer whose keys start with `prefix`.
Sd3Blocks count_sd3_blocks(const std::string& prefix, const std::vector<SourceTensor>& tensors);

/// The parts of `tensors` whose names start with `prefix` ("" or "model.diffusion_model."), under
/// SD3Transformer2DModel's names; tensors outside `prefix` get none. A key the rules do not know keeps
/// its name without the prefix, for the strict loader to report as unexpected. Throws InputError (one
/// line naming the key) for a fused qkv whose rows do not split in three and a (shift, scale)
/// modulation whose rows do not split in two.
std::vector<TensorPart> convert_sd3_keys(const std::string& prefix, const std::vector<SourceTensor>& tensors);

}  // namespace dpinfer::pipeline

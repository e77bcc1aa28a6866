#pragma once
// The denoising UNet of Stable Diffusion 1.x/2.x and SDXL, built from unet/config.json.

#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/unets/deep_cache.h"
#include "dpinfer/pipeline/models/unets/unet_2d_blocks.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline {

/// SDXL's added conditioning (addition_embed_type "text_time"), one row per sample.
struct AddedConditioning {
  at::Tensor text_embeds;  ///< [B, text_embeds_dim]: the pooled, projected prompt embedding
  at::Tensor time_ids;     ///< [B, 6]: original (h, w), crop (top, left), target (h, w)
};

/// diffusers' UNet2DConditionModel. Children carry diffusers' state_dict names
/// (conv_in, time_embedding, add_embedding, down_blocks, mid_block, up_blocks,
/// conv_norm_out, conv_out). Parameters are allocated uninitialised with `options`.
class UNet2DConditionModelImpl : public torch::nn::Module {
 public:
  explicit UNet2DConditionModelImpl(const UNetConfig& config,
                                    const at::TensorOptions& options = nn::default_options());

  /// The noise (or v) prediction: sample [B, in_channels, h, w] (any h, w: sizes that are
  /// not multiples of 2^num_upsamplers are handled as diffusers' forward_upsample_size),
  /// timestep a 0-d or [B] tensor of any dtype, encoder_hidden_states [B, L, cross_attention_dim],
  /// timestep_cond [B, time_cond_proj_dim] only for configs with time_cond_proj_dim,
  /// `added` only (and always) for configs with addition_embed_type text_time.
  /// `deep_cache` set: the call runs under DeepCache with this state (deep_cache.h), whose next_call() decided
  /// it: a full call keeps the branch's feature in it, a shallow one runs only the shallow branch from it.
  /// InputError when its branch's block is not one of this UNet's down blocks.
  /// Returns [B, out_channels, h, w] in the sample's dtype.
  at::Tensor forward(const at::Tensor& sample, const at::Tensor& timestep, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& timestep_cond = {}, const AddedConditioning* added = nullptr,
                     DeepCache* deep_cache = nullptr);

  const UNetConfig& config() const { return config_; }

 private:
  /// SDXL's aug_emb: add_embedding(cat(text_embeds, sinusoids of the time ids)), [B, time_embed_dim].
  at::Tensor text_time_embedding(const AddedConditioning* added, const at::Tensor& sample);

  UNetConfig config_;
  nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  nn::TimestepEmbedding time_embedding_{nullptr};
  nn::TimestepEmbedding add_embedding_{nullptr};
  std::vector<DownBlock2D> down_blocks_;
  UNetMidBlock2DCrossAttn mid_block_cross_attn_{nullptr};
  UNetMidBlock2D mid_block_plain_{nullptr};
  std::vector<UpBlock2D> up_blocks_;
  nn::GroupNorm conv_norm_out_{nullptr};
};
TORCH_MODULE(UNet2DConditionModel);

}  // namespace dpinfer::pipeline

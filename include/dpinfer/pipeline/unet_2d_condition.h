#pragma once
// The denoising UNet of Stable Diffusion 1.x/2.x, built from unet/config.json.

#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/embeddings.h"
#include "dpinfer/pipeline/model_configs.h"
#include "dpinfer/pipeline/unet_blocks.h"

namespace dpinfer::pipeline {

/// diffusers' UNet2DConditionModel. Children carry diffusers' state_dict names
/// (conv_in, time_embedding, down_blocks, mid_block, up_blocks, conv_norm_out, conv_out).
class UNet2DConditionModelImpl : public torch::nn::Module {
 public:
  explicit UNet2DConditionModelImpl(const UNetConfig& config);

  /// The noise (or v) prediction: sample [B, in_channels, h, w] (any h, w: sizes that are
  /// not multiples of 2^num_upsamplers are handled as diffusers' forward_upsample_size),
  /// timestep a 0-d or [B] tensor of any dtype, encoder_hidden_states [B, L, cross_attention_dim],
  /// timestep_cond [B, time_cond_proj_dim] only for configs with time_cond_proj_dim.
  /// Returns [B, out_channels, h, w] in the sample's dtype.
  at::Tensor forward(const at::Tensor& sample, const at::Tensor& timestep, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& timestep_cond = {});

  const UNetConfig& config() const { return config_; }

 private:
  UNetConfig config_;
  torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  TimestepEmbedding time_embedding_{nullptr};
  std::vector<DownBlock2D> down_blocks_;
  UNetMidBlock2DCrossAttn mid_block_cross_attn_{nullptr};
  UNetMidBlock2D mid_block_plain_{nullptr};
  std::vector<UpBlock2D> up_blocks_;
  torch::nn::GroupNorm conv_norm_out_{nullptr};
};
TORCH_MODULE(UNet2DConditionModel);

}  // namespace dpinfer::pipeline

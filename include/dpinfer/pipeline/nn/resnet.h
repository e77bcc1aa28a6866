#pragma once
// The convolutional building blocks shared by the UNet and the VAE.

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// What a ResnetBlock2D is built from (diffusers' defaults for the UNet and VAE).
struct ResnetBlock2DOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  /// Unset: no time_emb_proj (the VAE).
  std::optional<int64_t> temb_channels;
  int64_t groups = 32;
  double eps = 1e-6;
  double output_scale_factor = 1.0;
  /// diffusers <= 0.36 calls conv_shortcut(input_tensor.contiguous()); 0.37 (the FLUX.2 pin) passes the input as
  /// it is. On a channels-last input (an image the VAE encodes) the two 1x1 convolutions round apart in bf16.
  bool contiguous_shortcut_input = true;
};

/// diffusers' ResnetBlock2D with time_embedding_norm "default" and SiLU:
/// (shortcut(x) + conv2(SiLU(norm2(conv1(SiLU(norm1(x))) + time_emb_proj(SiLU(temb)))))) / output_scale_factor,
/// where conv_shortcut (1x1) exists only when in_channels != out_channels.
class ResnetBlock2DImpl : public torch::nn::Module {
 public:
  ResnetBlock2DImpl(const ResnetBlock2DOptions& options, const at::TensorOptions& tensor_options);

  /// [B, in, H, W] and temb [B, temb_channels] (undefined without time_emb_proj) to [B, out, H, W].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb = {});

 private:
  double output_scale_factor_;
  bool contiguous_shortcut_input_;
  GroupNorm norm1_{nullptr}, norm2_{nullptr};
  Conv2d conv1_{nullptr}, conv2_{nullptr}, conv_shortcut_{nullptr};
  Linear time_emb_proj_{nullptr};
};
TORCH_MODULE(ResnetBlock2D);

/// diffusers' Downsample2D with use_conv: a 3x3 stride-2 conv named "conv". With
/// padding 0 (the VAE encoder) the input is first padded by one on the right and bottom.
class Downsample2DImpl : public torch::nn::Module {
 public:
  Downsample2DImpl(int64_t channels, int64_t padding, const at::TensorOptions& options);

  /// [B, C, H, W] to [B, C, ceil(H/2), ceil(W/2)] (for padding 1, or padding 0 with the extra pad).
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t padding_;
  Conv2d conv_{nullptr};
};
TORCH_MODULE(Downsample2D);

/// diffusers' Upsample2D with use_conv: nearest-neighbour x2 (or to `output_size`), then a 3x3 conv "conv".
class Upsample2DImpl : public torch::nn::Module {
 public:
  Upsample2DImpl(int64_t channels, const at::TensorOptions& options);

  /// [B, C, H, W] to [B, C, 2H, 2W], or to [B, C, output_size[0], output_size[1]] when given
  /// (UNet2DConditionModel forwards the skip's size when the latent is not a multiple of 2^num_upsamplers).
  at::Tensor forward(const at::Tensor& x, const std::vector<int64_t>& output_size = {});

 private:
  Conv2d conv_{nullptr};
};
TORCH_MODULE(Upsample2D);

}  // namespace dpinfer::pipeline::nn

#pragma once
// The down, mid and up blocks of the UNet and of the VAE's encoder and decoder
// (diffusers/models/unets/unet_2d_blocks.py).

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/transformer_2d.h"
#include "dpinfer/pipeline/nn/attention.h"
#include "dpinfer/pipeline/nn/resnet.h"

namespace dpinfer::pipeline {

/// The Transformer2DModel that follows each resnet of a cross-attention block.
struct CrossAttentionOptions {
  int64_t heads = 8;
  int64_t transformer_layers = 1;
  int64_t cross_attention_dim = 768;
  bool use_linear_projection = false;
  bool only_cross_attention = false;
};

/// What a UNet down or up block is built from.
struct UNetBlockOptions {
  int64_t num_layers = 2;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  /// Up blocks only: the channels coming from the block below.
  int64_t prev_output_channels = 0;
  int64_t temb_channels = 0;
  int64_t groups = 32;
  double eps = 1e-5;
  double output_scale_factor = 1.0;
  /// A Downsample2D (down blocks) or Upsample2D (up blocks) at the end.
  bool add_sampler = true;
  int64_t downsample_padding = 1;
  /// Set: the block has "attentions" (CrossAttnDownBlock2D, CrossAttnUpBlock2D).
  std::optional<CrossAttentionOptions> attention;
};

/// diffusers' DownBlock2D, or CrossAttnDownBlock2D when options.attention is set:
/// num_layers resnets, each followed by a Transformer2DModel, then "downsamplers.0".
class DownBlock2DImpl : public torch::nn::Module {
 public:
  DownBlock2DImpl(const UNetBlockOptions& options, const at::TensorOptions& tensor_options);

  /// x [B, in, H, W] to [B, out, H', W']; appends each resnet (or attention) output
  /// and the downsampler output to `skips`, as diffusers' output_states.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context,
                     std::vector<at::Tensor>& skips);
  /// The first `layers` layers only (each a resnet, and its attention where the block has them), without the
  /// downsampler: DeepCache's shallow branch (deep_cache.h). Appends their outputs to `skips`; returns the last
  /// (x when `layers` is 0).
  at::Tensor forward_layers(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context,
                            std::vector<at::Tensor>& skips, int64_t layers);

  /// How many resnets (layers) it has.
  int64_t num_layers() const { return static_cast<int64_t>(resnets_.size()); }

 private:
  std::vector<nn::ResnetBlock2D> resnets_;
  std::vector<Transformer2DModel> attentions_;
  nn::Downsample2D downsampler_{nullptr};
};
TORCH_MODULE(DownBlock2D);

/// diffusers' UpBlock2D, or CrossAttnUpBlock2D when options.attention is set: each of
/// num_layers resnets takes cat([x, skips.pop_back()], 1), then "upsamplers.0".
class UpBlock2DImpl : public torch::nn::Module {
 public:
  UpBlock2DImpl(const UNetBlockOptions& options, const at::TensorOptions& tensor_options);

  /// Consumes num_layers entries from the back of `skips`. `upsample_size` empty: x2.
  /// DeepCache (deep_cache.h): with `from` > 0, x is the input of layer `from` and the layers before it do not run
  /// (nor take their skips: num_layers - from are consumed); with `keep` set, *keep is set to the input of layer
  /// `keep_layer` ([B, C, h, w]: x itself for layer 0, else the output of layer keep_layer - 1).
  at::Tensor forward(const at::Tensor& x, std::vector<at::Tensor>& skips, const at::Tensor& temb,
                     const at::Tensor& context, const std::vector<int64_t>& upsample_size = {}, int64_t from = 0,
                     at::Tensor* keep = nullptr, int64_t keep_layer = 0);

  /// How many skip connections forward() consumes.
  int64_t num_layers() const { return static_cast<int64_t>(resnets_.size()); }

 private:
  std::vector<nn::ResnetBlock2D> resnets_;
  std::vector<Transformer2DModel> attentions_;
  nn::Upsample2D upsampler_{nullptr};
};
TORCH_MODULE(UpBlock2D);

/// diffusers' UNetMidBlock2DCrossAttn with one layer: resnets.0, attentions.0, resnets.1.
class UNetMidBlock2DCrossAttnImpl : public torch::nn::Module {
 public:
  /// options.in_channels is the width; num_layers, out and sampler settings are ignored.
  UNetMidBlock2DCrossAttnImpl(const UNetBlockOptions& options, const at::TensorOptions& tensor_options);

  /// x [B, C, H, W], temb [B, temb_channels], context [B, M, cross_attention_dim] to [B, C, H, W].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context);

 private:
  nn::ResnetBlock2D resnet_0_{nullptr}, resnet_1_{nullptr};
  Transformer2DModel attention_{nullptr};
};
TORCH_MODULE(UNetMidBlock2DCrossAttn);

/// What a UNetMidBlock2D is built from.
struct UNetMidBlock2DOptions {
  int64_t in_channels = 0;
  /// Unset: no time embedding (the VAE).
  std::optional<int64_t> temb_channels;
  int64_t groups = 32;
  double eps = 1e-6;
  double output_scale_factor = 1.0;
  /// 1 (the VAE): resnets.0, attentions.0, resnets.1. 0 (UNet mid_block_type UNetMidBlock2D): resnets.0 only.
  int64_t num_layers = 1;
  bool add_attention = true;
  /// The attention's head width; diffusers' VAE uses in_channels, so one head.
  int64_t attention_head_dim = 0;
};

/// diffusers' UNetMidBlock2D: resnets interleaved with self-attention that has a
/// group_norm, biased projections and a residual connection.
class UNetMidBlock2DImpl : public torch::nn::Module {
 public:
  UNetMidBlock2DImpl(const UNetMidBlock2DOptions& options, const at::TensorOptions& tensor_options);

  /// [B, C, H, W] to [B, C, H, W]; temb only when built with temb_channels.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb = {});

 private:
  std::vector<nn::ResnetBlock2D> resnets_;
  std::vector<nn::Attention> attentions_;
};
TORCH_MODULE(UNetMidBlock2D);

/// diffusers' DownEncoderBlock2D (the VAE encoder): resnets without time embedding,
/// then "downsamplers.0" with padding 0 and the asymmetric pad.
class DownEncoderBlock2DImpl : public torch::nn::Module {
 public:
  /// `contiguous_shortcut_input`: nn::ResnetBlock2DOptions' (false for diffusers 0.37's VAEs: FLUX.2's).
  DownEncoderBlock2DImpl(int64_t num_layers, int64_t in_channels, int64_t out_channels, int64_t groups, double eps,
                         bool add_downsample, const at::TensorOptions& options, bool contiguous_shortcut_input = true);
  /// [B, in, H, W] to [B, out, ceil(H/2), ceil(W/2)], or [B, out, H, W] without the downsampler.
  at::Tensor forward(const at::Tensor& x);

 private:
  std::vector<nn::ResnetBlock2D> resnets_;
  nn::Downsample2D downsampler_{nullptr};
};
TORCH_MODULE(DownEncoderBlock2D);

/// diffusers' UpDecoderBlock2D (the VAE decoder): resnets without time embedding, then "upsamplers.0".
class UpDecoderBlock2DImpl : public torch::nn::Module {
 public:
  UpDecoderBlock2DImpl(int64_t num_layers, int64_t in_channels, int64_t out_channels, int64_t groups, double eps,
                       bool add_upsample, const at::TensorOptions& options, bool contiguous_shortcut_input = true);
  /// [B, in, H, W] to [B, out, 2H, 2W], or [B, out, H, W] without the upsampler.
  at::Tensor forward(const at::Tensor& x);

 private:
  std::vector<nn::ResnetBlock2D> resnets_;
  nn::Upsample2D upsampler_{nullptr};
};
TORCH_MODULE(UpDecoderBlock2D);

}  // namespace dpinfer::pipeline

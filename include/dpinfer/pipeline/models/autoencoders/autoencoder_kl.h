#pragma once
// The Stable Diffusion VAE, built from vae/config.json: decode latents to images,
// encode images to the latent distribution.

#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/unets/unet_2d_blocks.h"
#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline {

/// diffusers' vae.Encoder: conv_in, down_blocks (DownEncoderBlock2D), mid_block, conv_norm_out, SiLU,
/// conv_out to 2 * latent_channels (mean and log-variance).
class VAEEncoderImpl : public torch::nn::Module {
 public:
  VAEEncoderImpl(const AutoencoderKLConfig& config, const at::TensorOptions& options);
  /// [B, in_channels, H, W] to [B, 2 * latent_channels, H / scale_factor, W / scale_factor].
  at::Tensor forward(const at::Tensor& x);

 private:
  nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  std::vector<DownEncoderBlock2D> down_blocks_;
  UNetMidBlock2D mid_block_{nullptr};
  nn::GroupNorm conv_norm_out_{nullptr};
};
TORCH_MODULE(VAEEncoder);

/// diffusers' vae.Decoder: conv_in, mid_block, up_blocks (UpDecoderBlock2D), conv_norm_out, SiLU, conv_out.
class VAEDecoderImpl : public torch::nn::Module {
 public:
  VAEDecoderImpl(const AutoencoderKLConfig& config, const at::TensorOptions& options);
  /// [B, latent_channels, h, w] to [B, out_channels, h * scale_factor, w * scale_factor].
  at::Tensor forward(const at::Tensor& z);

 private:
  nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  UNetMidBlock2D mid_block_{nullptr};
  std::vector<UpDecoderBlock2D> up_blocks_;
  nn::GroupNorm conv_norm_out_{nullptr};
};
TORCH_MODULE(VAEDecoder);

/// The latent distribution encode() returns (diffusers' DiagonalGaussianDistribution).
struct LatentDist {
  at::Tensor mean;    ///< [B, latent_channels, h, w]: the mode, what img2img scales and noises
  at::Tensor logvar;  ///< same shape, clamped to [-30, 20] as diffusers does
};

/// diffusers' AutoencoderKL: encoder, quant_conv, post_quant_conv, decoder (state_dict names).
/// decode() and encode() work on unscaled latents: the pipeline applies scaling_factor and shift_factor.
class AutoencoderKLImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLImpl(const AutoencoderKLConfig& config,
                             const at::TensorOptions& options = nn::default_options());

  /// Latents [B, latent_channels, h, w] (already divided by scaling_factor) to images
  /// [B, out_channels, 8h, 8w] (for SD) in about [-1, 1]. With tiling on and h or w over
  /// tile_latent_min_size(), through tiled_decode() (diffusers' _decode).
  at::Tensor decode(const at::Tensor& z);

  /// Images [B, in_channels, H, W] in [-1, 1] to the latent distribution. With tiling on and H
  /// or W over tile_sample_min_size(), through tiled_encode() (diffusers' _encode).
  LatentDist encode(const at::Tensor& x);

  /// diffusers' enable_tiling() (true) and disable_tiling() (false): decode and encode large
  /// inputs in overlapping tiles, blended; the image differs from the untiled one. Off by default.
  /// Throws InputError for a config whose sample_size is a list, on which diffusers' tiling fails.
  void set_tiling(bool on);
  bool tiling() const { return use_tiling_; }

  /// diffusers' tile sizes, from the config: tile_sample_min_size is sample_size (its first
  /// entry when a list), tile_latent_min_size int(sample_size / 2^(levels - 1)); the tiles
  /// overlap by tile_overlap_factor 0.25.
  int64_t tile_sample_min_size() const { return config_.sample_size; }
  int64_t tile_latent_min_size() const;

  /// diffusers' tiled_decode, whatever the latent's size: tiles of tile_latent_min_size latents
  /// every 0.75 of that, each through post_quant_conv (when the config has it) and the decoder,
  /// blended over 0.25 of tile_sample_min_size pixels and cut to the rest.
  /// [B, latent_channels, h, w] to [B, out_channels, H, W].
  at::Tensor tiled_decode(const at::Tensor& z);

  /// diffusers' _tiled_encode, whatever the image's size: tiles of tile_sample_min_size pixels
  /// every 0.75 of that, each through the encoder and quant_conv (when the config has it),
  /// blended over 0.25 of tile_latent_min_size latents. [B, in_channels, H, W] to the moments
  /// [B, 2 * latent_channels, h, w].
  at::Tensor tiled_encode(const at::Tensor& x);

  const AutoencoderKLConfig& config() const { return config_; }

 private:
  AutoencoderKLConfig config_;
  bool use_tiling_ = false;
  VAEEncoder encoder_{nullptr};
  VAEDecoder decoder_{nullptr};
  nn::Conv2d quant_conv_{nullptr}, post_quant_conv_{nullptr};
};
TORCH_MODULE(AutoencoderKL);

}  // namespace dpinfer::pipeline

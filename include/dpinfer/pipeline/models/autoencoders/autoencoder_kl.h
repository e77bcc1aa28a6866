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
  /// [B, out_channels, 8h, 8w] (for SD) in about [-1, 1].
  at::Tensor decode(const at::Tensor& z);

  /// Images [B, in_channels, H, W] in [-1, 1] to the latent distribution.
  LatentDist encode(const at::Tensor& x);

  const AutoencoderKLConfig& config() const { return config_; }

 private:
  AutoencoderKLConfig config_;
  VAEEncoder encoder_{nullptr};
  VAEDecoder decoder_{nullptr};
  nn::Conv2d quant_conv_{nullptr}, post_quant_conv_{nullptr};
};
TORCH_MODULE(AutoencoderKL);

}  // namespace dpinfer::pipeline

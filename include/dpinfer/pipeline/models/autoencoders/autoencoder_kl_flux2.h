#pragma once
// FLUX.2's VAE: diffusers' AutoencoderKLFlux2, the AutoencoderKL encoder and decoder (32 latent channels)
// plus `bn`, a BatchNorm2d without affine over the 2x2-patchified latents (4 * latent_channels) whose
// running statistics the pipelines use to normalise the latents the transformer sees.

#include <array>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"

namespace dpinfer::pipeline {

/// diffusers' AutoencoderKLFlux2 config (models/autoencoders/autoencoder_kl_flux2.py, 0.37.0): AutoencoderKL's
/// fields (there is no scaling_factor or shift_factor: the batch-norm statistics take their place) and bn's.
struct AutoencoderKLFlux2Config {
  AutoencoderKLConfig kl;
  /// BatchNorm2d's eps, added to running_var.
  double batch_norm_eps = 1e-4;
  /// The patchify of the latents bn runs over; the pipelines hard-code 2x2, so only [2, 2] is taken.
  std::array<int64_t, 2> patch_size{2, 2};

  /// The channels of the patchified latents: patch_size[0] * patch_size[1] * latent_channels.
  int64_t patched_channels() const { return patch_size[0] * patch_size[1] * kl.latent_channels; }

  /// Throws dpinfer::Error naming the field at fault.
  static AutoencoderKLFlux2Config from_json(const nlohmann::json& json);
};

/// AutoencoderKL with `bn` (running_mean, running_var [4 * latent_channels] as buffers; its
/// num_batches_tracked is not loaded: nothing reads it). Decoding takes the latents as the VAE sees them,
/// after unnormalize() and unpatchify().
class AutoencoderKLFlux2Impl : public AutoencoderKLImpl {
 public:
  explicit AutoencoderKLFlux2Impl(const AutoencoderKLFlux2Config& config,
                                  const at::TensorOptions& options = nn::default_options());

  /// Flux2KleinPipeline.__call__ after the loop: latents [B, 4C, h, w] (patchified) * sqrt(running_var + eps)
  /// + running_mean, the statistics computed in the VAE's dtype and cast to the latents' dtype, as there.
  at::Tensor unnormalize(const at::Tensor& latents) const;

  /// Flux2KleinPipeline._encode_vae_image after the encode: latents [B, 4C, h, w] (patchified) less
  /// running_mean (cast to the latents' dtype), over sqrt(running_var + eps) (in the VAE's dtype, as there).
  at::Tensor normalize(const at::Tensor& latents) const;
  /// Flux2KleinPipeline._patchify_latents: [B, C, 2h, 2w] to [B, 4C, h, w], each channel's 2x2 patch
  /// (row-major) as 4 channels; unpatchify() undoes it.
  static at::Tensor patchify(const at::Tensor& latents);
  /// Flux2KleinPipeline._unpatchify_latents: [B, 4C, h, w] to [B, C, 2h, 2w], each channel's 2x2 patch
  /// (row-major) back into place.
  static at::Tensor unpatchify(const at::Tensor& latents);

  const AutoencoderKLFlux2Config& flux2_config() const { return flux2_config_; }

  at::Tensor running_mean, running_var;

 private:
  AutoencoderKLFlux2Config flux2_config_;
};
TORCH_MODULE(AutoencoderKLFlux2);

}  // namespace dpinfer::pipeline

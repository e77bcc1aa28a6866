#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_flux2.h"

#include <memory>

#include <nlohmann/json.hpp>

#include "dpinfer/io/config_reader.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

// Ref: diffusers/models/autoencoders/autoencoder_kl_flux2.py AutoencoderKLFlux2.__init__ (0.37.0)
AutoencoderKLFlux2Config AutoencoderKLFlux2Config::from_json(const nlohmann::json& j) {
  AutoencoderKLFlux2Config c;
  c.kl = AutoencoderKLConfig::from_json(j);
  // diffusers 0.37's ResnetBlock2D, the first with this class, no longer makes the shortcut's input contiguous.
  c.kl.contiguous_shortcut_input = false;
  io::ConfigReader r(j, "vae config");
  c.batch_norm_eps = r.number("batch_norm_eps", c.batch_norm_eps);
  if (!(c.batch_norm_eps >= 0)) throw r.error("batch_norm_eps", "must be >= 0");
  const std::vector<int64_t> patch = r.integers("patch_size", {2, 2});
  if (patch != std::vector<int64_t>{2, 2})
    throw r.error("patch_size", "must be [2, 2], the patchify Flux2KleinPipeline applies to the latents");
  return c;
}

AutoencoderKLFlux2Impl::AutoencoderKLFlux2Impl(const AutoencoderKLFlux2Config& config,
                                               const at::TensorOptions& options)
    : AutoencoderKLImpl(config.kl, options), flux2_config_(config) {
  // BatchNorm2d(4 * latent_channels, affine=False, track_running_stats=True): buffers only.
  auto bn = register_module("bn", std::make_shared<torch::nn::Module>());
  running_mean = bn->register_buffer("running_mean", at::empty({config.patched_channels()}, options));
  running_var = bn->register_buffer("running_var", at::empty({config.patched_channels()}, options));
}

at::Tensor AutoencoderKLFlux2Impl::unnormalize(const at::Tensor& latents) const {
  // latents_bn_mean = running_mean.view(1, -1, 1, 1).to(latents); latents_bn_std = sqrt(running_var.view(...)
  // + batch_norm_eps).to(latents); latents * latents_bn_std + latents_bn_mean
  const auto to = latents.options();
  const at::Tensor mean = running_mean.view({1, -1, 1, 1}).to(to);
  const at::Tensor std = at::sqrt(running_var.view({1, -1, 1, 1}) + flux2_config_.batch_norm_eps).to(to);
  return latents * std + mean;
}

at::Tensor AutoencoderKLFlux2Impl::normalize(const at::Tensor& latents) const {
  // latents_bn_mean = running_mean.view(1, -1, 1, 1).to(device, dtype); latents_bn_std = torch.sqrt(
  // running_var.view(1, -1, 1, 1) + batch_norm_eps) (not cast); (image_latents - mean) / std
  const at::Tensor mean = running_mean.view({1, -1, 1, 1}).to(latents.options());
  const at::Tensor std = at::sqrt(running_var.view({1, -1, 1, 1}) + flux2_config_.batch_norm_eps);
  return (latents - mean) / std;
}

at::Tensor AutoencoderKLFlux2Impl::patchify(const at::Tensor& latents) {
  // view(B, C, h, 2, w, 2).permute(0, 1, 3, 5, 2, 4).reshape(B, C * 4, h, w)
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2) / 2, w = latents.size(3) / 2;
  return latents.reshape({b, c, h, 2, w, 2}).permute({0, 1, 3, 5, 2, 4}).reshape({b, c * 4, h, w});
}

at::Tensor AutoencoderKLFlux2Impl::unpatchify(const at::Tensor& latents) {
  // reshape(B, C // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(B, C // 4, 2h, 2w)
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2), w = latents.size(3);
  return latents.reshape({b, c / 4, 2, 2, h, w}).permute({0, 1, 4, 2, 5, 3}).reshape({b, c / 4, 2 * h, 2 * w});
}

}  // namespace dpinfer::pipeline

// Ref: diffusers/pipelines/flux/pipeline_flux.py FluxPipeline._pack_latents, _unpack_latents and
// _prepare_latent_image_ids (ChromaPipeline's are copies of them, QwenImagePipeline's packing the same on
// one frame); FluxInpaintPipeline's and QwenImageInpaintPipeline's prepare_mask_latents.
#include "flux_latents.h"

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

at::Tensor pack_latents(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.view({b, c, h / 2, 2, w / 2, 2}).permute({0, 2, 4, 1, 3, 5}).reshape({b, (h / 2) * (w / 2), c * 4});
}

at::Tensor unpack_latents(const at::Tensor& x, int64_t h, int64_t w) {
  const int64_t b = x.size(0), c = x.size(2) / 4;
  return x.view({b, h / 2, w / 2, c, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({b, c, h, w});
}

at::Tensor latent_image_ids(int64_t rows, int64_t cols, const at::TensorOptions& options) {
  at::Tensor ids = at::zeros({rows, cols, 3});
  ids.select(2, 1).add_(at::arange(rows).unsqueeze(1));
  ids.select(2, 2).add_(at::arange(cols).unsqueeze(0));
  return ids.reshape({rows * cols, 3}).to(options);
}

PackedInpainting packed_inpainting(const std::vector<ImageRequest>& batch, const ImageStart& start, int64_t h,
                                   int64_t w, const at::TensorOptions& options) {
  const int64_t channels = start.image_latents.size(1);
  return {pack_latents(start.image_latents), pack_latents(start.noise),
          pack_latents(latent_masks(batch, h, w).to(options).repeat({1, channels, 1, 1}))};
}

void check_packed_channels(int64_t in_channels, int64_t out_features, const AutoencoderKLConfig& vae) {
  if (in_channels != 4 * vae.latent_channels || out_features != in_channels)
    throw InputError("transformer config: in_channels " + std::to_string(in_channels) +
                     " and patch_size^2 * out_channels " + std::to_string(out_features) +
                     " must both be 4 * the VAE's latent_channels (" + std::to_string(4 * vae.latent_channels) +
                     "); the components do not belong together");
}

void check_vae_shift_factor(const AutoencoderKLConfig& vae, const std::string& pipeline_class) {
  if (!vae.shift_factor)
    throw InputError("vae config: shift_factor is missing or null, and " + pipeline_class +
                     " decodes latents / scaling_factor + shift_factor; the VAE is not FLUX.1's");
}

at::Tensor packed_latents_for_decode(const at::Tensor& latents, int64_t h, int64_t w, const AutoencoderKLConfig& vae,
                                     at::ScalarType dtype) {
  // latents / scaling_factor + shift_factor, in the VAE's dtype
  return unpack_latents(latents, h, w).to(dtype) / vae.scaling_factor + *vae.shift_factor;
}

}  // namespace dpinfer::pipeline

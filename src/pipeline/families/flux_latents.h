#pragma once
// The latent layout FluxPipeline and ChromaPipeline share (diffusers' pipelines/flux/pipeline_flux.py,
// copied into pipelines/chroma/pipeline_chroma.py), and QwenImagePipeline on its one frame: 2x2 packing
// of the latents into tokens, its inverse, the (0, row, column) RoPE ids of the packed grid, and what the
// inpainting pipelines of those layouts blend back after every step.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "denoising.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"

namespace dpinfer::pipeline {

/// [B, C, h, w] latents as 2x2 patches, [B, (h/2)(w/2), 4C]: _pack_latents.
at::Tensor pack_latents(const at::Tensor& x);

/// The inverse of pack_latents() for latents of h x w: _unpack_latents.
at::Tensor unpack_latents(const at::Tensor& x, int64_t h, int64_t w);

/// _prepare_latent_image_ids(h/2, w/2): [(h/2)(w/2), 3] rows (0, row, column), row-major, in `options`'
/// dtype (the prompt embeddings' in diffusers).
at::Tensor latent_image_ids(int64_t rows, int64_t cols, const at::TensorOptions& options);

/// Inpainting with packed latents (FluxInpaintPipeline, QwenImageInpaintPipeline: prepare_mask_latents and the
/// blend), each packed [B, (h/2)(w/2), 4C]: the mask binarized, F.interpolate'd (nearest) to the h x w latents in
/// `options`, repeated over the C channels; and `start`'s image latents and noise. Their encoding of the masked image
/// only moves each generator on, and nothing draws after it (flow matching steps without noise): not done.
struct PackedInpainting {
  at::Tensor image, noise, mask;
};
PackedInpainting packed_inpainting(const std::vector<ImageRequest>& batch, const ImageStart& start, int64_t h,
                                   int64_t w, const at::TensorOptions& options);

/// FluxPipeline's and ChromaPipeline's fit of transformer and VAE: the transformer's in_channels and
/// patch_size^2 * out_channels (`out_features`) both 4 * the VAE's latent_channels, the packed latents. Throws
/// InputError naming them.
void check_packed_channels(int64_t in_channels, int64_t out_features, const AutoencoderKLConfig& vae);

/// The VAE has a shift_factor, which FLUX.1's latents need both ways (`pipeline_class`, for the message, decodes
/// latents / scaling_factor + shift_factor). Throws InputError.
void check_vae_shift_factor(const AutoencoderKLConfig& vae, const std::string& pipeline_class);

/// Packed latents [B, (h/2)(w/2), 4C] as FluxPipeline and ChromaPipeline hand them to the VAE's decode: unpacked to
/// [B, C, h, w] in `dtype`, then latents / scaling_factor + shift_factor.
at::Tensor packed_latents_for_decode(const at::Tensor& latents, int64_t h, int64_t w, const AutoencoderKLConfig& vae,
                                     at::ScalarType dtype);

}  // namespace dpinfer::pipeline

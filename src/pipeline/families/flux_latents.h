#pragma once
// The latent layout FluxPipeline and ChromaPipeline share (diffusers' pipelines/flux/pipeline_flux.py,
// copied into pipelines/chroma/pipeline_chroma.py), and QwenImagePipeline on its one frame: 2x2 packing
// of the latents into tokens, its inverse, the (0, row, column) RoPE ids of the packed grid, and what the
// inpainting pipelines of those layouts blend back after every step.

#include <cstdint>

#include <vector>

#include <ATen/ATen.h>

#include "denoising.h"

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

}  // namespace dpinfer::pipeline

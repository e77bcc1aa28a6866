#pragma once
// The latent layout FluxPipeline and ChromaPipeline share (diffusers' pipelines/flux/pipeline_flux.py,
// copied into pipelines/chroma/pipeline_chroma.py): 2x2 packing of the latents into tokens, its inverse,
// and the (0, row, column) RoPE ids of the packed grid.

#include <cstdint>

#include <ATen/ATen.h>

namespace dpinfer::pipeline {

/// [B, C, h, w] latents as 2x2 patches, [B, (h/2)(w/2), 4C]: _pack_latents.
at::Tensor pack_latents(const at::Tensor& x);

/// The inverse of pack_latents() for latents of h x w: _unpack_latents.
at::Tensor unpack_latents(const at::Tensor& x, int64_t h, int64_t w);

/// _prepare_latent_image_ids(h/2, w/2): [(h/2)(w/2), 3] rows (0, row, column), row-major, in `options`'
/// dtype (the prompt embeddings' in diffusers).
at::Tensor latent_image_ids(int64_t rows, int64_t cols, const at::TensorOptions& options);

}  // namespace dpinfer::pipeline

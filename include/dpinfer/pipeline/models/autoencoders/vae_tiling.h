#pragma once
// What diffusers' tiled VAE decoders and encoders share: the linear blend of a tile's top and
// left edge into its neighbours (blend_v, blend_h), and the pass that blends a grid of tiles,
// keeps each tile's top-left part and joins them. AutoencoderKL and AutoencoderKLQwenImage
// each cut their own tiles and call these.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace dpinfer::pipeline {

/// diffusers' blend_v, in place on `b`: for y < extent (extent at most both tiles' heights),
/// b row y = a row (height_a - extent + y) * (1 - y / extent) + b row y * (y / extent), rows
/// along dim -2. Ref: diffusers/models/autoencoders/autoencoder_kl.py blend_v (0.36.0).
void blend_v(const at::Tensor& a, at::Tensor& b, int64_t extent);

/// diffusers' blend_h: blend_v along dim -1 (columns).
void blend_h(const at::Tensor& a, at::Tensor& b, int64_t extent);

/// The second half of diffusers' tiled_decode / _tiled_encode: row by row, each tile gets the
/// tile above blended into its top `blend_height` rows, then the tile on its left into its left
/// `blend_width` columns, in place, so a later tile blends with its neighbours as already
/// blended (diffusers' order); then the top-left [keep_height, keep_width] of each tile, joined
/// along dims -1 and -2. `tiles`: rows of tiles [..., h, w].
at::Tensor blend_and_join_tiles(std::vector<std::vector<at::Tensor>>& tiles, int64_t blend_height,
                                int64_t blend_width, int64_t keep_height, int64_t keep_width);

}  // namespace dpinfer::pipeline

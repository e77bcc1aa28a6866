#include "dpinfer/pipeline/models/autoencoders/vae_tiling.h"

#include <algorithm>

namespace dpinfer::pipeline {
namespace {

// Ref: diffusers/models/autoencoders/autoencoder_kl.py blend_v and blend_h (0.36.0), the same
// in autoencoder_kl_qwenimage.py on 5D tiles. The weights are Python's doubles (1 - y / extent
// and y / extent), which torch multiplies as a scalar in the tensor's compute type, as here.
void blend(const at::Tensor& a, at::Tensor& b, int64_t extent, int64_t dim) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  for (int64_t y = 0; y < extent; ++y) {
    const double w = static_cast<double>(y) / static_cast<double>(extent);
    at::Tensor line = b.select(dim, y);  // a view: the assignment writes b
    line.copy_(a.select(dim, a.size(dim) - extent + y) * (1.0 - w) + line * w);
  }
}

}  // namespace

void blend_v(const at::Tensor& a, at::Tensor& b, int64_t extent) { blend(a, b, extent, b.dim() - 2); }

void blend_h(const at::Tensor& a, at::Tensor& b, int64_t extent) { blend(a, b, extent, b.dim() - 1); }

at::Tensor blend_and_join_tiles(std::vector<std::vector<at::Tensor>>& tiles, int64_t blend_height,
                                int64_t blend_width, int64_t keep_height, int64_t keep_width) {
  std::vector<at::Tensor> rows;
  for (size_t i = 0; i < tiles.size(); ++i) {
    std::vector<at::Tensor> row;
    for (size_t j = 0; j < tiles[i].size(); ++j) {
      at::Tensor& tile = tiles[i][j];
      if (i > 0) blend_v(tiles[i - 1][j], tile, blend_height);
      if (j > 0) blend_h(tiles[i][j - 1], tile, blend_width);
      const int64_t h = tile.dim() - 2, w = tile.dim() - 1;
      row.push_back(tile.slice(h, 0, keep_height).slice(w, 0, keep_width));
    }
    rows.push_back(at::cat(row, -1));
  }
  return at::cat(rows, -2);
}

}  // namespace dpinfer::pipeline

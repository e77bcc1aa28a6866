#include "dpinfer/pipeline/nn/patchify.h"

namespace dpinfer::pipeline::nn {

at::Tensor patchify_fhw(const at::Tensor& latents, int64_t patch, int64_t f_patch) {
  const int64_t b = latents.size(0), c = latents.size(1);
  const int64_t f = latents.size(2) / f_patch, h = latents.size(3) / patch, w = latents.size(4) / patch;
  return latents.view({b, c, f, f_patch, h, patch, w, patch})
      .permute({0, 2, 4, 6, 3, 5, 7, 1})
      .reshape({b, f * h * w, f_patch * patch * patch * c});
}

at::Tensor unpatchify_fhw(const at::Tensor& tokens, int64_t channels, int64_t frames, int64_t height, int64_t width,
                          int64_t patch, int64_t f_patch) {
  const int64_t b = tokens.size(0);
  const int64_t f = frames / f_patch, h = height / patch, w = width / patch;
  return tokens.reshape({b, f, h, w, f_patch, patch, patch, channels})
      .permute({0, 7, 1, 4, 2, 5, 3, 6})
      .reshape({b, channels, frames, height, width});
}

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/embeddings.h"

#include <cmath>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {

// Ref: diffusers/models/embeddings.py get_timestep_embedding. The operation order is
// kept so that float32 rounding matches.
at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos, double freq_shift,
                              double scale) {
  const int64_t half = dim / 2;
  at::Tensor exponent = at::arange(0, half, timesteps.options().dtype(at::kFloat)) * -std::log(10000.0);
  exponent = exponent / (static_cast<double>(half) - freq_shift);
  at::Tensor angles = timesteps.unsqueeze(1).to(at::kFloat) * at::exp(exponent).unsqueeze(0);  // [N, half]
  if (scale != 1.0) angles = angles * scale;  // `emb = scale * emb`; a product with 1 changes no bit
  at::Tensor emb = flip_sin_to_cos ? at::cat({at::cos(angles), at::sin(angles)}, -1)
                                   : at::cat({at::sin(angles), at::cos(angles)}, -1);  // [N, 2 half]
  if (dim % 2 == 1) emb = at::constant_pad_nd(emb, {0, 1});
  return emb;
}

// Ref: diffusers/models/embeddings.py TimestepEmbedding
TimestepEmbeddingImpl::TimestepEmbeddingImpl(int64_t in_channels, int64_t time_embed_dim,
                                             std::optional<int64_t> cond_proj_dim, const at::TensorOptions& options) {
  linear_1_ = register_module("linear_1", Linear(in_channels, time_embed_dim, true, options));
  if (cond_proj_dim) cond_proj_ = register_module("cond_proj", Linear(*cond_proj_dim, in_channels, false, options));
  linear_2_ = register_module("linear_2", Linear(time_embed_dim, time_embed_dim, true, options));
}

at::Tensor TimestepEmbeddingImpl::forward(const at::Tensor& sample, const at::Tensor& condition) {
  at::Tensor x = sample;
  if (condition.defined()) {
    if (cond_proj_.is_empty())
      throw Error("unet: timestep_cond was given but the unet config has no time_cond_proj_dim; pass no timestep_cond");
    x = x + cond_proj_(condition);
  }
  return linear_2_(at::silu(linear_1_(x)));
}

// Ref: diffusers/models/embeddings.py PixArtAlphaTextProjection (act_fn "silu")
PixArtAlphaTextProjectionImpl::PixArtAlphaTextProjectionImpl(int64_t in_features, int64_t hidden_size,
                                                             const at::TensorOptions& options) {
  linear_1_ = register_module("linear_1", Linear(in_features, hidden_size, true, options));
  linear_2_ = register_module("linear_2", Linear(hidden_size, hidden_size, true, options));
}

at::Tensor PixArtAlphaTextProjectionImpl::forward(const at::Tensor& caption) {
  return linear_2_(at::silu(linear_1_(caption)));
}

}  // namespace dpinfer::pipeline::nn

#pragma once
// The UNet's timestep embedding: sinusoidal features, then a two-layer MLP.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// diffusers' get_timestep_embedding: [N] timesteps to [N, dim] float32 features
/// [sin(a), cos(a)] (or [cos, sin] when `flip_sin_to_cos`), a_j = scale * (t f_j), with
/// frequencies f_j = exp(-ln(10000) j / (dim/2 - freq_shift)). Computed in float32 whatever
/// the timesteps' dtype (a bfloat16 t is widened, not re-rounded); an odd `dim` gets one
/// zero column. `scale` is Timesteps' scale (Qwen-Image: 1000), applied after t f as there.
at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos, double freq_shift,
                              double scale = 1.0);

/// diffusers' TimestepEmbedding with SiLU: linear_1, SiLU, linear_2, plus the
/// optional bias-free cond_proj (time_cond_proj_dim) added to the input first.
class TimestepEmbeddingImpl : public torch::nn::Module {
 public:
  TimestepEmbeddingImpl(int64_t in_channels, int64_t time_embed_dim, std::optional<int64_t> cond_proj_dim,
                        const at::TensorOptions& options);

  /// [B, in_channels] (and an optional [B, cond_proj_dim] condition) to [B, time_embed_dim].
  at::Tensor forward(const at::Tensor& sample, const at::Tensor& condition = {});

 private:
  Linear linear_1_{nullptr}, linear_2_{nullptr}, cond_proj_{nullptr};
};
TORCH_MODULE(TimestepEmbedding);

/// diffusers' PixArtAlphaTextProjection with act_fn "silu", the pooled-text embedder of the
/// MMDiTs' CombinedTimestep(Guidance)TextProjEmbeddings (SD3, Flux): linear_1 (in, hidden),
/// SiLU, linear_2 (hidden, hidden), both with bias.
class PixArtAlphaTextProjectionImpl : public torch::nn::Module {
 public:
  PixArtAlphaTextProjectionImpl(int64_t in_features, int64_t hidden_size, const at::TensorOptions& options);
  /// [B, in_features] to [B, hidden_size].
  at::Tensor forward(const at::Tensor& caption);

 private:
  Linear linear_1_{nullptr}, linear_2_{nullptr};
};
TORCH_MODULE(PixArtAlphaTextProjection);

}  // namespace dpinfer::pipeline::nn

#pragma once
// The DiT timestep embedder: sinusoidal features of the timestep, then a two-layer MLP.

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// diffusers' Z-Image TimestepEmbedder (models/transformers/transformer_z_image.py): features
/// [cos(t f), sin(t f)], f_j = exp(-ln(10000) j / (F/2)), F = frequency_embedding_size, in
/// float32 (the same arithmetic as nn::timestep_embedding with flip_sin_to_cos and no shift),
/// cast to the MLP's dtype, then mlp.0 Linear(F, mid), SiLU, mlp.2 Linear(mid, out).
class DitTimestepEmbedderImpl : public torch::nn::Module {
 public:
  DitTimestepEmbedderImpl(int64_t out_size, int64_t mid_size, int64_t frequency_embedding_size,
                          const at::TensorOptions& options);

  /// t [B] (any float or integer dtype, already scaled) to [B, out_size] in the weights' dtype.
  at::Tensor forward(const at::Tensor& t);

 private:
  int64_t frequency_embedding_size_;
  Linear linear_0_{nullptr}, linear_2_{nullptr};
};
TORCH_MODULE(DitTimestepEmbedder);

}  // namespace dpinfer::pipeline::nn

#pragma once
// The SwiGLU feed-forward of the LLaMA-style DiT blocks (Z-Image).

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// w2(silu(w1 x) * w3 x), three bias-free Linears: w1, w3 [hidden, dim], w2 [dim, hidden].
/// Ref: diffusers/models/transformers/transformer_z_image.py FeedForward.
class SwiGLUFeedForwardImpl : public torch::nn::Module {
 public:
  SwiGLUFeedForwardImpl(int64_t dim, int64_t hidden_dim, const at::TensorOptions& options);
  /// [..., dim] to [..., dim].
  at::Tensor forward(const at::Tensor& x);

 private:
  Linear w1_{nullptr}, w2_{nullptr}, w3_{nullptr};
};
TORCH_MODULE(SwiGLUFeedForward);

}  // namespace dpinfer::pipeline::nn

#pragma once
// diffusers' FeedForward with the GEGLU activation, as SD's transformer blocks use it.

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// diffusers' GEGLU: proj to 2 * dim_out, then h * gelu(gate) (exact erf GELU).
class GEGLUImpl : public torch::nn::Module {
 public:
  GEGLUImpl(int64_t dim_in, int64_t dim_out, const at::TensorOptions& options);
  /// [..., dim_in] to [..., dim_out].
  at::Tensor forward(const at::Tensor& x);

 private:
  Linear proj_{nullptr};
};
TORCH_MODULE(GEGLU);

/// diffusers' FeedForward with activation_fn "geglu" and mult 4: net.0 (GEGLU), net.2 (Linear).
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, const at::TensorOptions& options);
  /// [..., dim] to [..., dim] through a 4 * dim hidden layer.
  at::Tensor forward(const at::Tensor& x);

 private:
  GEGLU geglu_{nullptr};
  Linear out_{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace dpinfer::pipeline::nn

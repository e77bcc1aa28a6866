#pragma once
// diffusers' FeedForward: with the GEGLU activation, as SD's transformer blocks use it, or with
// tanh-approximated GELU, as Qwen-Image's double-stream blocks use it.

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

/// diffusers' GELU: proj to dim_out, then gelu, exact (erf) or tanh-approximated.
class GELUImpl : public torch::nn::Module {
 public:
  GELUImpl(int64_t dim_in, int64_t dim_out, bool tanh_approximation, const at::TensorOptions& options);
  /// [..., dim_in] to [..., dim_out].
  at::Tensor forward(const at::Tensor& x);

 private:
  bool tanh_;
  Linear proj_{nullptr};
};
TORCH_MODULE(GELU);

/// The activation_fn of a diffusers FeedForward that dpinfer implements.
enum class FeedForwardActivation {
  kGEGLU,           ///< "geglu": net.0 is a GEGLU
  kGELUApproximate  ///< "gelu-approximate": net.0 is a GELU with approximate="tanh"
};

/// diffusers' FeedForward with mult 4 (inner 4 * dim), dim_out = dim and biases: net.0 (the
/// activation module with its proj), net.2 (Linear); net.1 is Dropout.
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, const at::TensorOptions& options,
                  FeedForwardActivation activation = FeedForwardActivation::kGEGLU);
  /// [..., dim] to [..., dim] through a 4 * dim hidden layer.
  at::Tensor forward(const at::Tensor& x);

 private:
  GEGLU geglu_{nullptr};
  GELU gelu_{nullptr};
  Linear out_{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/feed_forward.h"

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

namespace dpinfer::pipeline::nn {

// Ref: diffusers/models/activations.py GEGLU
GEGLUImpl::GEGLUImpl(int64_t dim_in, int64_t dim_out, const at::TensorOptions& options) {
  proj_ = register_module("proj", Linear(dim_in, dim_out * 2, true, options));
}

at::Tensor GEGLUImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> parts = proj_(x).chunk(2, -1);
  return parts[0] * at::gelu(parts[1]);
}

// Ref: diffusers/models/activations.py GELU
GELUImpl::GELUImpl(int64_t dim_in, int64_t dim_out, bool tanh_approximation, const at::TensorOptions& options)
    : tanh_(tanh_approximation) {
  proj_ = register_module("proj", Linear(dim_in, dim_out, true, options));
}

at::Tensor GELUImpl::forward(const at::Tensor& x) { return at::gelu(proj_(x), tanh_ ? "tanh" : "none"); }

// Ref: diffusers/models/attention.py FeedForward
FeedForwardImpl::FeedForwardImpl(int64_t dim, const at::TensorOptions& options, FeedForwardActivation activation) {
  const int64_t inner_dim = 4 * dim;
  out_ = Linear(inner_dim, dim, true, options);
  // net.1 is Dropout: an Identity keeps net.2's index.
  if (activation == FeedForwardActivation::kGEGLU) {
    geglu_ = GEGLU(dim, inner_dim, options);
    register_module("net", torch::nn::ModuleList(geglu_, torch::nn::Identity(), out_));
  } else {
    gelu_ = GELU(dim, inner_dim, /*tanh_approximation=*/true, options);
    register_module("net", torch::nn::ModuleList(gelu_, torch::nn::Identity(), out_));
  }
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) { return out_(geglu_.is_empty() ? gelu_(x) : geglu_(x)); }

}  // namespace dpinfer::pipeline::nn

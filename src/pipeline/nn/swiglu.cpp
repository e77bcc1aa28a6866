#include "dpinfer/pipeline/nn/swiglu.h"

namespace dpinfer::pipeline::nn {

SwiGLUFeedForwardImpl::SwiGLUFeedForwardImpl(int64_t dim, int64_t hidden_dim, const at::TensorOptions& options) {
  w1_ = register_module("w1", Linear(dim, hidden_dim, false, options));
  w2_ = register_module("w2", Linear(hidden_dim, dim, false, options));
  w3_ = register_module("w3", Linear(dim, hidden_dim, false, options));
}

at::Tensor SwiGLUFeedForwardImpl::forward(const at::Tensor& x) { return w2_(at::silu(w1_(x)) * w3_(x)); }

}  // namespace dpinfer::pipeline::nn

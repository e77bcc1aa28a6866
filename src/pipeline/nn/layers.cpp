#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options), /*requires_grad=*/false);
  if (with_bias) bias = register_parameter("bias", at::empty({out_features}, options), false);
}

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
                       bool with_bias, const at::TensorOptions& options)
    : stride_(stride), padding_(padding) {
  weight = register_parameter("weight", at::empty({out_channels, in_channels, kernel, kernel}, options), false);
  if (with_bias) bias = register_parameter("bias", at::empty({out_channels}, options), false);
}

at::Tensor Conv2dImpl::forward(const at::Tensor& x) const {
  return at::conv2d(x, weight, bias, {stride_, stride_}, {padding_, padding_});
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps, const at::TensorOptions& options)
    : groups_(groups), eps_(eps) {
  weight = register_parameter("weight", at::empty({channels}, options), false);
  bias = register_parameter("bias", at::empty({channels}, options), false);
}

LayerNormImpl::LayerNormImpl(int64_t dim, double eps, bool affine, const at::TensorOptions& options)
    : dim_(dim), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", at::empty({dim}, options), false);
    bias = register_parameter("bias", at::empty({dim}, options), false);
  }
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({num_embeddings, dim}, options), false);
}

// Ref: transformers/models/qwen3/modeling_qwen3.py Qwen3RMSNorm (= Qwen2RMSNorm, LlamaRMSNorm)
LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t dim, double eps, const at::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::empty({dim}, options), false);
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) const {
  at::Tensor h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(x.scalar_type());
}

}  // namespace dpinfer::pipeline::nn

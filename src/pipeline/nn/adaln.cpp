#include "dpinfer/pipeline/nn/adaln.h"

namespace dpinfer::pipeline::nn {

// Ref: diffusers/models/transformers/transformer_z_image.py ZImageTransformerBlock and FinalLayer
// (adaLN_modulation = Sequential(Linear) and Sequential(SiLU, Linear)).
AdaLNModulationImpl::AdaLNModulationImpl(int64_t in_dim, int64_t dim, int64_t chunks, bool silu_first,
                                         const at::TensorOptions& options)
    : chunks_(chunks), silu_first_(silu_first) {
  linear_ = register_module(silu_first ? "1" : "0", Linear(in_dim, chunks * dim, true, options));
}

std::vector<at::Tensor> AdaLNModulationImpl::forward(const at::Tensor& c) {
  at::Tensor h = linear_(silu_first_ ? at::silu(c) : c).unsqueeze(1);  // [B, 1, chunks * dim]
  return h.chunk(chunks_, -1);
}

// Ref: diffusers/models/normalization.py AdaLayerNormContinuous (norm_type "layer_norm")
AdaLayerNormContinuousImpl::AdaLayerNormContinuousImpl(int64_t dim, int64_t cond_dim, double eps,
                                                       const at::TensorOptions& options)
    : dim_(dim), eps_(eps) {
  linear_ = register_module("linear", Linear(cond_dim, 2 * dim, true, options));
}

at::Tensor AdaLayerNormContinuousImpl::forward(const at::Tensor& x, const at::Tensor& c) {
  const std::vector<at::Tensor> emb = linear_(at::silu(c).to(x.scalar_type())).chunk(2, 1);  // [B, dim] each
  const at::Tensor& scale = emb[0];
  const at::Tensor& shift = emb[1];
  return at::layer_norm(x, {dim_}, {}, {}, eps_) * (1 + scale).unsqueeze(1) + shift.unsqueeze(1);
}

// Ref: diffusers/models/normalization.py AdaLayerNormZero, AdaLayerNormZeroSingle and SD35AdaLayerNormZeroX
AdaLayerNormZeroImpl::AdaLayerNormZeroImpl(int64_t dim, int64_t chunks, double eps, const at::TensorOptions& options)
    : dim_(dim), chunks_(chunks), eps_(eps) {
  linear_ = register_module("linear", Linear(dim, chunks * dim, true, options));
}

std::vector<at::Tensor> AdaLayerNormZeroImpl::chunks(const at::Tensor& emb) {
  return linear_(at::silu(emb)).chunk(chunks_, 1);  // [B, dim] each
}

AdaLayerNormZeroImpl::Output AdaLayerNormZeroImpl::forward(const at::Tensor& x, const at::Tensor& emb) {
  std::vector<at::Tensor> e = chunks(emb);
  Output out;
  out.x = modulate_tokens(norm(x), /*shift=*/e[0], /*scale=*/e[1]);
  out.rest.assign(e.begin() + 2, e.end());
  return out;
}

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/rms_norm.h"

namespace dpinfer::pipeline::nn {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, bool elementwise_affine, const at::TensorOptions& options,
                         RMSNormKind kind)
    : dim_(dim), eps_(eps), kind_(kind) {
  if (elementwise_affine) weight = register_parameter("weight", at::empty({dim}, options), /*requires_grad=*/false);
}

// Ref: torch/nn/modules/normalization.py RMSNorm(eps=None)
RMSNormImpl::RMSNormImpl(int64_t dim, std::nullopt_t, bool elementwise_affine, const at::TensorOptions& options)
    : dim_(dim), eps_(std::nullopt), kind_(RMSNormKind::kTorch) {
  if (elementwise_affine) weight = register_parameter("weight", at::empty({dim}, options), /*requires_grad=*/false);
}

// Ref: diffusers/models/normalization.py RMSNorm.forward (the non-NPU branch). The product
// x * rsqrt(...) promotes x to float32; the cast to a half weight dtype comes before the
// multiply, as there.
at::Tensor RMSNormImpl::forward(const at::Tensor& x) const {
  // Ref: torch/nn/modules/normalization.py RMSNorm.forward: F.rms_norm(x, (dim,), weight, eps).
  if (kind_ == RMSNormKind::kTorch) return at::rms_norm(x, {dim_}, weight, eps_);
  const at::Tensor variance = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);  // [..., 1] float32
  at::Tensor h = x * at::rsqrt(variance + *eps_);                                      // [..., dim] float32
  if (!weight.defined()) return h.to(x.scalar_type());
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) h = h.to(weight.scalar_type());
  return h * weight;
}

}  // namespace dpinfer::pipeline::nn

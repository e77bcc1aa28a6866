#pragma once
// diffusers' RMSNorm, the normalisation of the DiTs (Z-Image's block norms, its caption
// embedder, and the per-head QK norm of their attention), and torch.nn.RMSNorm, the per-head QK
// norm of Flux's attention.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace dpinfer::pipeline::nn {

/// Which RMSNorm a module computes; they round differently in half precision.
enum class RMSNormKind {
  kDiffusers,  ///< diffusers' RMSNorm (below)
  kTorch,      ///< torch.nn.RMSNorm: at::rms_norm, the op torch.nn.functional.rms_norm calls
};

/// diffusers' RMSNorm (models/normalization.py): x * rsqrt(mean(x^2) + eps) over the last
/// dimension, computed in float32 whatever x's dtype; with a weight [dim], the result is cast
/// to the weight's dtype when that is float16 or bfloat16 and then multiplied by it (so a
/// float32 weight gives a float32 result); without one, it is cast back to x's dtype. With
/// RMSNormKind::kTorch, torch.nn.RMSNorm instead (FluxAttention's norm_q, norm_k, norm_added_q,
/// norm_added_k): the same parameter, computed by at::rms_norm.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, bool elementwise_affine, const at::TensorOptions& options,
              RMSNormKind kind = RMSNormKind::kDiffusers);
  /// torch.nn.RMSNorm(dim) with eps None, as Chroma's approximator builds its norms: at::rms_norm
  /// is given no eps and uses the machine epsilon of the input's type, as torch does.
  RMSNormImpl(int64_t dim, std::nullopt_t, bool elementwise_affine, const at::TensorOptions& options);
  /// [..., dim] to [..., dim].
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor weight;

 private:
  int64_t dim_;
  std::optional<double> eps_;  // unset only for kTorch: torch's default
  RMSNormKind kind_;
};
TORCH_MODULE(RMSNorm);

}  // namespace dpinfer::pipeline::nn

#pragma once
// AdaLN modulation of the DiTs: the conditioning vector (the timestep embedding) projected
// to per-sample scales, shifts and gates.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// diffusers' adaLN_modulation Sequential: [SiLU,] Linear(in_dim, chunks * dim, bias). Its
/// Linear is child "0", or "1" after the parameter-free SiLU, as the state_dict names it.
class AdaLNModulationImpl : public torch::nn::Module {
 public:
  AdaLNModulationImpl(int64_t in_dim, int64_t dim, int64_t chunks, bool silu_first, const at::TensorOptions& options);

  /// c [B, in_dim] to `chunks` tensors [B, 1, dim], in the order of the Linear's output
  /// (torch.chunk of linear(c).unsqueeze(1) along the last dimension).
  std::vector<at::Tensor> forward(const at::Tensor& c);

 private:
  int64_t chunks_;
  bool silu_first_;
  Linear linear_{nullptr};
};
TORCH_MODULE(AdaLNModulation);

/// diffusers' AdaLayerNormContinuous with a LayerNorm and no affine (elementwise_affine False),
/// the norm_out of the MMDiTs (Qwen-Image, Flux, SD3): linear = Linear(cond_dim, 2 * dim, bias);
/// scale, shift = chunk(linear(silu(c)), 2) -- scale first; out = norm(x) * (1 + scale) + shift.
class AdaLayerNormContinuousImpl : public torch::nn::Module {
 public:
  AdaLayerNormContinuousImpl(int64_t dim, int64_t cond_dim, double eps, const at::TensorOptions& options);

  /// x [B, N, dim], c [B, cond_dim] to [B, N, dim]. silu(c) is cast to x's dtype before the
  /// linear, as diffusers casts it.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& c);

 private:
  int64_t dim_;
  double eps_;
  Linear linear_{nullptr};
};
TORCH_MODULE(AdaLayerNormContinuous);

/// diffusers' AdaLayerNormZero (6 chunks: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp,
/// gate_mlp) and SD35AdaLayerNormZeroX (9: those, then shift_msa2, scale_msa2, gate_msa2) with
/// norm_type "layer_norm", the SD3 blocks' norm1 / norm1_context: linear = Linear(dim, chunks *
/// dim, bias) on silu(emb); norm = LayerNorm(dim, eps 1e-6) without affine. The block applies
/// the chunks itself (norm(x) * (1 + scale) + shift), as both diffusers classes do.
class AdaLayerNormZeroImpl : public torch::nn::Module {
 public:
  AdaLayerNormZeroImpl(int64_t dim, int64_t chunks, const at::TensorOptions& options);

  /// emb [B, dim] to `chunks` tensors [B, dim]: chunk(linear(silu(emb)), chunks, dim=1).
  std::vector<at::Tensor> chunks(const at::Tensor& emb);
  /// The LayerNorm: x [B, N, dim] to [B, N, dim].
  at::Tensor norm(const at::Tensor& x) const { return at::layer_norm(x, {dim_}, {}, {}, kEps); }

  static constexpr double kEps = 1e-6;

 private:
  int64_t dim_, chunks_;
  Linear linear_{nullptr};
};
TORCH_MODULE(AdaLayerNormZero);

/// x * (1 + scale[:, None]) + shift[:, None] for x [B, N, dim], shift and scale [B, dim]: the
/// modulation of diffusers' AdaLayerNormZero and of the SD3 blocks' MLP inputs.
inline at::Tensor modulate_tokens(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

}  // namespace dpinfer::pipeline::nn

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
/// gate_mlp), AdaLayerNormZeroSingle (3: shift_msa, scale_msa, gate_msa) and SD35AdaLayerNormZeroX
/// (9: the six, then shift_msa2, scale_msa2, gate_msa2), all with norm_type "layer_norm" and no
/// class embedding (models/normalization.py): the block norms of Flux (norm1, norm1_context; the
/// single blocks' norm) and SD3 (norm1, norm1_context). linear = Linear(dim, chunks * dim, bias) on
/// silu(emb); norm = LayerNorm(dim, eps) without affine. forward() applies the first two chunks
/// as those diffusers classes do (norm(x) * (1 + scale) + shift); SD3's blocks, which reuse norm(x)
/// with other chunks (attn2's), call chunks() and norm() themselves.
class AdaLayerNormZeroImpl : public torch::nn::Module {
 public:
  AdaLayerNormZeroImpl(int64_t dim, int64_t chunks, double eps, const at::TensorOptions& options);

  struct Output {
    at::Tensor x;                  ///< [B, N, dim], normalised and modulated
    std::vector<at::Tensor> rest;  ///< chunks - 2 tensors [B, dim]: gate_msa (and shift_mlp, scale_mlp, gate_mlp, ...)
  };

  /// x [B, N, dim], emb [B, dim].
  Output forward(const at::Tensor& x, const at::Tensor& emb);

  /// emb [B, dim] to `chunks` tensors [B, dim]: chunk(linear(silu(emb)), chunks, dim=1).
  std::vector<at::Tensor> chunks(const at::Tensor& emb);
  /// The LayerNorm: x [B, N, dim] to [B, N, dim].
  at::Tensor norm(const at::Tensor& x) const { return at::layer_norm(x, {dim_}, {}, {}, eps_); }

 private:
  int64_t dim_, chunks_;
  double eps_;
  Linear linear_{nullptr};
};
TORCH_MODULE(AdaLayerNormZero);

/// x * (1 + scale[:, None]) + shift[:, None] for x [B, N, dim], shift and scale [B, dim]: the
/// modulation of diffusers' AdaLayerNormZero and of the SD3 blocks' MLP inputs.
inline at::Tensor modulate_tokens(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

}  // namespace dpinfer::pipeline::nn

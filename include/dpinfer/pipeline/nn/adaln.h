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

/// diffusers' AdaLayerNormZero and AdaLayerNormZeroSingle (models/normalization.py; norm_type
/// "layer_norm", no class embedding), the block norms of Flux: linear = Linear(dim, chunks * dim,
/// bias) with chunks 6 (AdaLayerNormZero) or 3 (AdaLayerNormZeroSingle); e = chunk(linear(silu(c)),
/// chunks) gives shift, scale, then the rest; out = LayerNorm(x, eps, no affine) * (1 + scale) +
/// shift.
class AdaLayerNormZeroImpl : public torch::nn::Module {
 public:
  AdaLayerNormZeroImpl(int64_t dim, int64_t chunks, double eps, const at::TensorOptions& options);

  struct Output {
    at::Tensor x;                  ///< [B, N, dim], normalised and modulated
    std::vector<at::Tensor> rest;  ///< chunks - 2 tensors [B, dim]: gate_msa (and shift_mlp, scale_mlp, gate_mlp)
  };

  /// x [B, N, dim], c [B, dim].
  Output forward(const at::Tensor& x, const at::Tensor& c);

 private:
  int64_t dim_, chunks_;
  double eps_;
  Linear linear_{nullptr};
};
TORCH_MODULE(AdaLayerNormZero);

}  // namespace dpinfer::pipeline::nn

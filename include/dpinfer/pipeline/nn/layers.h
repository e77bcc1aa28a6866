#pragma once
// The leaf layers every model is built from: LibTorch's Linear, Conv2d, GroupNorm,
// LayerNorm and Embedding, and transformers' RMSNorm, with the same parameter names
// and the same forward, but allocated uninitialised (at::empty) with the caller's
// TensorOptions: in the run dtype, on the target device, or on the meta device to
// learn names and shapes without memory. The weights always come from a checkpoint, so LibTorch's random
// initialisation (in fp32 on the CPU, then a cast and a move) would only cost time
// and host memory: a 12B transformer would need 48 GB of it per rank.

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace dpinfer::pipeline::nn {

/// torch.nn.Linear: y = x W^T + b. weight [out, in], bias [out].
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias, const at::TensorOptions& options);
  /// [..., in] to [..., out], computed as torch.nn.functional.linear computes it for diffusers'
  /// and transformers' modules, whose weights are Parameters that require grad even under no_grad
  /// (see layers.cpp).
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor weight, bias;
};
TORCH_MODULE(Linear);

/// torch.nn.Conv2d (groups 1, dilation 1, zero padding). weight [out, in, k, k], bias [out].
class Conv2dImpl : public torch::nn::Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias,
             const at::TensorOptions& options);
  /// [B, in, H, W] to [B, out, H', W'].
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor weight, bias;

 private:
  int64_t stride_, padding_;
};
TORCH_MODULE(Conv2d);

/// torch.nn.GroupNorm with affine weight and bias [channels].
class GroupNormImpl : public torch::nn::Module {
 public:
  GroupNormImpl(int64_t groups, int64_t channels, double eps, const at::TensorOptions& options);
  /// [B, C, ...] normalised over each group of C / groups channels.
  at::Tensor forward(const at::Tensor& x) const { return at::group_norm(x, groups_, weight, bias, eps_); }

  at::Tensor weight, bias;

 private:
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(GroupNorm);

/// torch.nn.LayerNorm over the last dimension, with weight and bias [dim] when `affine`.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, bool affine, const at::TensorOptions& options);
  /// [..., dim] to [..., dim].
  at::Tensor forward(const at::Tensor& x) const { return at::layer_norm(x, {dim_}, weight, bias, eps_); }

  at::Tensor weight, bias;

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

/// torch.nn.Embedding: weight [num_embeddings, dim].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, const at::TensorOptions& options);
  /// Integer ids [...] to [..., dim].
  at::Tensor forward(const at::Tensor& ids) const { return at::embedding(weight, ids); }

  at::Tensor weight;
};
TORCH_MODULE(Embedding);

/// transformers' LlamaRMSNorm, which Qwen2RMSNorm, Qwen2_5_VL's and Qwen3RMSNorm copy: x over
/// the last dimension, normalised in fp32 (x * rsqrt(mean(x^2) + eps)), cast back to x's dtype,
/// then times weight [dim] in that dtype. diffusers' RMSNorm rounds differently (it casts to
/// the weight's dtype), so the two are not interchangeable in half precision.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t dim, double eps, const at::TensorOptions& options);
  /// [..., dim] to [..., dim], in x's dtype.
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(LlamaRMSNorm);

/// The options a module is built with when a caller gives none: float32 on the CPU.
inline at::TensorOptions default_options() { return at::TensorOptions().dtype(at::kFloat); }

}  // namespace dpinfer::pipeline::nn

#pragma once
// Attention and the spatial transformer of the UNet, and the VAE's mid-block attention.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

namespace dpinfer::pipeline {

/// What an Attention is built from.
struct AttentionOptions {
  int64_t query_dim = 0;
  /// Unset: self-attention (keys and values come from the query input).
  std::optional<int64_t> cross_attention_dim;
  int64_t heads = 8;
  int64_t dim_head = 64;
  /// Bias on to_q, to_k, to_v (to_out.0 always has one).
  bool bias = false;
  /// Set: a GroupNorm "group_norm" over the channels before the projections (the VAE).
  std::optional<int64_t> norm_num_groups;
  double eps = 1e-5;
  /// Add the input back after to_out (the VAE).
  bool residual_connection = false;
  double rescale_output_factor = 1.0;
};

/// diffusers' Attention run by AttnProcessor2_0: to_q/to_k/to_v, multi-head
/// scaled_dot_product_attention (scale dim_head^-0.5), to_out.0. upcast_attention
/// and upcast_softmax have no effect here, as under AttnProcessor2_0.
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& options);

  /// x [B, N, query_dim] or [B, C, H, W] (then attended over H*W, shape kept);
  /// context [B, M, cross_attention_dim], or undefined for self-attention.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {});

 private:
  int64_t heads_;
  bool residual_connection_;
  double rescale_output_factor_;
  torch::nn::GroupNorm group_norm_{nullptr};
  torch::nn::Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_0_{nullptr};
  torch::nn::ModuleList to_out_{nullptr};
};
TORCH_MODULE(Attention);

/// diffusers' GEGLU: proj to 2 * dim_out, then h * gelu(gate) (exact erf GELU).
class GEGLUImpl : public torch::nn::Module {
 public:
  GEGLUImpl(int64_t dim_in, int64_t dim_out);
  /// [..., dim_in] to [..., dim_out].
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Linear proj_{nullptr};
};
TORCH_MODULE(GEGLU);

/// diffusers' FeedForward with activation_fn "geglu" and mult 4: net.0 (GEGLU), net.2 (Linear).
class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(int64_t dim);
  /// [..., dim] to [..., dim] through a 4 * dim hidden layer.
  at::Tensor forward(const at::Tensor& x);

 private:
  GEGLU geglu_{nullptr};
  torch::nn::Linear out_{nullptr};
};
TORCH_MODULE(FeedForward);

/// diffusers' BasicTransformerBlock with norm_type "layer_norm":
/// x += attn1(norm1(x)); x += attn2(norm2(x), context); x += ff(norm3(x)).
/// With only_cross_attention, attn1 attends to the context too.
class BasicTransformerBlockImpl : public torch::nn::Module {
 public:
  BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t dim_head, int64_t cross_attention_dim,
                            bool only_cross_attention);

  /// x [B, N, dim], context [B, M, cross_attention_dim] to [B, N, dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context);

 private:
  bool only_cross_attention_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr}, norm3_{nullptr};
  Attention attn1_{nullptr}, attn2_{nullptr};
  FeedForward ff_{nullptr};
};
TORCH_MODULE(BasicTransformerBlock);

/// What a Transformer2DModel (continuous input) is built from.
struct Transformer2DOptions {
  int64_t in_channels = 0;
  int64_t heads = 8;
  int64_t num_layers = 1;
  int64_t cross_attention_dim = 768;
  int64_t norm_num_groups = 32;
  /// Linear proj_in/proj_out on [B, HW, C] (SD 2.x) instead of 1x1 convs (SD 1.x).
  bool use_linear_projection = false;
  bool only_cross_attention = false;
};

/// diffusers' Transformer2DModel on continuous input: GroupNorm "norm" (eps 1e-6),
/// proj_in, transformer_blocks, proj_out, plus the input. inner_dim = in_channels,
/// each head in_channels / heads wide.
class Transformer2DModelImpl : public torch::nn::Module {
 public:
  explicit Transformer2DModelImpl(const Transformer2DOptions& options);

  /// x [B, C, H, W], context [B, M, cross_attention_dim] to [B, C, H, W].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context);

 private:
  bool use_linear_projection_;
  torch::nn::GroupNorm norm_{nullptr};
  torch::nn::Conv2d proj_in_conv_{nullptr}, proj_out_conv_{nullptr};
  torch::nn::Linear proj_in_linear_{nullptr}, proj_out_linear_{nullptr};
  torch::nn::ModuleList transformer_blocks_{nullptr};
};
TORCH_MODULE(Transformer2DModel);

}  // namespace dpinfer::pipeline

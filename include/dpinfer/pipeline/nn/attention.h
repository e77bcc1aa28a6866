#pragma once
// diffusers' Attention, and the places dpinfer calls scaled_dot_product_attention: the
// UNet and the VAE through AttentionImpl, the DiTs through dot_product_attention(), the
// decoder-LLM text encoders through causal_attention().

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline::nn {

/// Multi-head scaled dot-product attention, softmax(q k^T / sqrt(d) + mask) v, as torch's
/// F.scaled_dot_product_attention (dropout 0, not causal) computes it: q [B, h, N, d],
/// k and v [B, h, M, d]; `mask` undefined, or a bool mask broadcastable to [B, h, N, M]
/// (true: attend), e.g. [B, 1, 1, M] for keys padded per batch item. Returns [B, h, N, d].
at::Tensor dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask = {});

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
  AttentionImpl(const AttentionOptions& options, const at::TensorOptions& tensor_options);

  /// x [B, N, query_dim] or [B, C, H, W] (then attended over H*W, shape kept);
  /// context [B, M, cross_attention_dim], or undefined for self-attention.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {});

 private:
  int64_t heads_;
  bool residual_connection_;
  double rescale_output_factor_;
  GroupNorm group_norm_{nullptr};
  Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_0_{nullptr};
};
TORCH_MODULE(Attention);

/// transformers' sdpa_attention_forward as a causal decoder (Qwen2, Qwen2.5-VL, Qwen3, Llama)
/// runs it, with grouped-query attention. q [B, H, L, D]; k, v [B, H_kv, L, D] with H a
/// multiple of H_kv; key_padding_mask [B, L] (bool or integer, nonzero = a real token) or
/// undefined. Returns [B, H, L, D]. Takes the same kernel path as transformers: with no mask,
/// or a mask of all ones, SDPA with is_causal and enable_gqa; otherwise k and v repeated to
/// H heads and a boolean [B, 1, L, L] mask (causal and not padding). A query row with no
/// visible key (left padding) gets what SDPA gives it, as in transformers.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& key_padding_mask, double scale);

}  // namespace dpinfer::pipeline::nn

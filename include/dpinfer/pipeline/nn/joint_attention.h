#pragma once
// The DiTs' self-attention over one joint sequence (image and text tokens together), with
// per-head QK RMSNorm, rotary position embedding and a key padding mask.

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/rms_norm.h"

namespace dpinfer::pipeline::nn {

/// What a JointAttention is built from.
struct JointAttentionOptions {
  int64_t dim = 0;
  int64_t heads = 1;
  int64_t dim_head = 0;
  /// norm_q / norm_k: RMSNorm [dim_head] with a weight (diffusers' qk_norm "rms_norm").
  bool qk_norm = true;
  double qk_norm_eps = 1e-5;
  /// Bias on to_q, to_k, to_v; and on to_out.0.
  bool bias = false;
  bool out_bias = false;
};

/// diffusers' Attention run by Z-Image's ZSingleStreamAttnProcessor: to_q, to_k, to_v,
/// split into heads, norm_q/norm_k, RoPE on q and k (nn::apply_rotary_emb_complex), the
/// one SDPA call (nn::dot_product_attention, scale dim_head^-0.5), heads merged, to_out.0.
class JointAttentionImpl : public torch::nn::Module {
 public:
  JointAttentionImpl(const JointAttentionOptions& options, const at::TensorOptions& tensor_options);

  /// x [B, N, dim]; mask [B, N] bool (true: a real key) or undefined; freqs complex64
  /// [B, N, dim_head/2] or undefined (no RoPE). Returns [B, N, dim] in x's dtype.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask, const at::Tensor& freqs);

 private:
  int64_t heads_;
  Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_0_{nullptr};
  RMSNorm norm_q_{nullptr}, norm_k_{nullptr};
};
TORCH_MODULE(JointAttention);

}  // namespace dpinfer::pipeline::nn

#pragma once
// The DiTs' self-attention over one joint sequence (image and text tokens together), with
// per-head QK RMSNorm, rotary position embedding and a key padding mask: single-stream (one set
// of projections for every token, Z-Image) and double-stream (the text tokens with their own
// projections and norms, the MMDiTs: Qwen-Image, Flux). Flux's FluxAttention is the same with
// torch.nn.RMSNorm QK norms, real-valued RoPE over the joint sequence, and (single-stream,
// pre_only) no output projection.

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/rms_norm.h"
#include "dpinfer/pipeline/nn/rope.h"

namespace dpinfer::pipeline::nn {

/// What a JointAttention is built from.
struct JointAttentionOptions {
  int64_t dim = 0;
  int64_t heads = 1;
  int64_t dim_head = 0;
  /// norm_q / norm_k: RMSNorm [dim_head] with a weight (diffusers' qk_norm "rms_norm").
  bool qk_norm = true;
  double qk_norm_eps = 1e-5;
  /// diffusers' RMSNorm (Z-Image, Qwen-Image) or torch.nn.RMSNorm (FluxAttention).
  RMSNormKind qk_norm_kind = RMSNormKind::kDiffusers;
  /// Bias on to_q, to_k, to_v; and on to_out.0.
  bool bias = false;
  bool out_bias = false;
  /// No to_out: the attention's merged heads are the output (FluxAttention pre_only, the
  /// single-stream blocks of Flux). JointAttention only.
  bool pre_only = false;
  /// DoubleStreamAttention only. The joint sequence's order: [text, image] (Qwen-Image) or, false,
  /// [image, text] as SD3's JointAttnProcessor2_0 concatenates it, with its heads-first layout.
  bool text_first = true;
  /// DoubleStreamAttention only: diffusers' context_pre_only, the last SD3 block, whose text
  /// stream ends here: no to_add_out, and no text output.
  bool context_pre_only = false;
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

  /// The same with Flux's real RoPE (FluxAttnProcessor without encoder_hidden_states): freqs
  /// over the N tokens; attn_mask undefined (Flux) or SDPA's attn_mask as the processor passes it,
  /// broadcastable to [B, h, N, N] (Chroma's [B, 1, N, N]: bool, or float added to the scores).
  /// (Not a forward() overload: ModuleHolder's operator() needs one.)
  at::Tensor forward_real_rope(const at::Tensor& x, const RotaryCosSin& freqs, const at::Tensor& attn_mask = {});

 private:
  /// attn_mask: SDPA's, already broadcastable to [B, h, N, N], or undefined.
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& attn_mask);

  int64_t heads_;
  Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_0_{nullptr};
  RMSNorm norm_q_{nullptr}, norm_k_{nullptr};
};
TORCH_MODULE(JointAttention);

/// diffusers' Attention with added_kv_proj_dim = dim and context_pre_only False, run by
/// Qwen-Image's QwenDoubleStreamAttnProcessor2_0: the image stream through to_q, to_k, to_v,
/// norm_q, norm_k and to_out.0; the text stream through add_q_proj, add_k_proj, add_v_proj,
/// norm_added_q, norm_added_k and to_add_out (all Linears with `bias`, the outputs with
/// `out_bias`); RoPE on each stream's q and k; one SDPA (nn::dot_product_attention, scale
/// dim_head^-0.5) over the joint sequence [text, image].
/// With text_first false it is SD3's JointAttnProcessor2_0 instead: q, k, v turned heads-first
/// [B, h, N, d] and concatenated as [image, text] along the sequence, as that processor does
/// (the same values; the layout kept so that SDPA sees the same strides); with context_pre_only,
/// no to_add_out and no text output.
class DoubleStreamAttentionImpl : public torch::nn::Module {
 public:
  DoubleStreamAttentionImpl(const JointAttentionOptions& options, const at::TensorOptions& tensor_options);

  struct Output {
    at::Tensor image;  ///< [B, N_img, dim]
    at::Tensor text;   ///< [B, N_txt, dim]; undefined with context_pre_only
  };

  /// image [B, N_img, dim], text [B, N_txt, dim]; image_freqs complex64 [N_img, dim_head/2] and
  /// text_freqs [N_txt, dim_head/2], shared by the batch (both undefined: no RoPE); mask [B,
  /// N_txt + N_img] bool over the joint sequence, in its order (true: a key to attend) or
  /// undefined (every key attended, as diffusers 0.36 attends them).
  Output forward(const at::Tensor& image, const at::Tensor& text, const at::Tensor& image_freqs,
                 const at::Tensor& text_freqs, const at::Tensor& mask);

  /// FluxAttnProcessor's order: the projections and QK norms per stream, then the joint sequence
  /// [text, image] rotated by `freqs` (Flux's real RoPE, [N_txt + N_img, dim_head]), one SDPA, and
  /// the two streams' output projections. attn_mask: undefined (Flux) or SDPA's attn_mask as the
  /// processor passes it, broadcastable to [B, h, N, N] (Chroma's [B, 1, N, N] over [text, image]).
  Output forward_real_rope(const at::Tensor& image, const at::Tensor& text, const RotaryCosSin& freqs,
                           const at::Tensor& attn_mask = {});

 private:
  struct Projected {
    at::Tensor img_q, img_k, img_v, txt_q, txt_k, txt_v;  // [B, N, h, d], QK-normed
  };
  Projected project(const at::Tensor& image, const at::Tensor& text);
  /// q, k, v [B, N_txt + N_img, h, d] in the order [text, image] (Qwen-Image, Flux); attn_mask
  /// SDPA's, broadcastable to [B, h, N, N], or undefined.
  Output attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& attn_mask,
                int64_t n_txt);
  /// SD3's JointAttnProcessor2_0 layout: each stream heads-first, joined as [image, text].
  Output attend_image_first(const Projected& p, const at::Tensor& mask);

  int64_t heads_;
  bool text_first_;
  Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_0_{nullptr};
  Linear add_q_proj_{nullptr}, add_k_proj_{nullptr}, add_v_proj_{nullptr}, to_add_out_{nullptr};
  RMSNorm norm_q_{nullptr}, norm_k_{nullptr}, norm_added_q_{nullptr}, norm_added_k_{nullptr};
};
TORCH_MODULE(DoubleStreamAttention);

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/joint_attention.h"

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/pipeline/nn/attention.h"
#include "dpinfer/pipeline/nn/rope.h"

namespace dpinfer::pipeline::nn {

// Ref: diffusers/models/attention_processor.py Attention (qk_norm "rms_norm") and
// diffusers/models/transformers/transformer_z_image.py ZSingleStreamAttnProcessor
JointAttentionImpl::JointAttentionImpl(const JointAttentionOptions& options, const at::TensorOptions& tensor_options)
    : heads_(options.heads) {
  const int64_t inner_dim = options.heads * options.dim_head;
  to_q_ = register_module("to_q", Linear(options.dim, inner_dim, options.bias, tensor_options));
  to_k_ = register_module("to_k", Linear(options.dim, inner_dim, options.bias, tensor_options));
  to_v_ = register_module("to_v", Linear(options.dim, inner_dim, options.bias, tensor_options));
  if (options.qk_norm) {
    norm_q_ = register_module(
        "norm_q", RMSNorm(options.dim_head, options.qk_norm_eps, true, tensor_options, options.qk_norm_kind));
    norm_k_ = register_module(
        "norm_k", RMSNorm(options.dim_head, options.qk_norm_eps, true, tensor_options, options.qk_norm_kind));
  }
  if (!options.pre_only) {
    to_out_0_ = Linear(inner_dim, options.dim, options.out_bias, tensor_options);
    register_module("to_out", torch::nn::ModuleList(to_out_0_));  // to_out.1 is Dropout
  }
}

at::Tensor JointAttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask, const at::Tensor& freqs) {
  auto split_heads = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };  // [B, N, h, d]
  at::Tensor q = split_heads(to_q_(x)), k = split_heads(to_k_(x)), v = split_heads(to_v_(x));
  if (!norm_q_.is_empty()) q = norm_q_(q);
  if (!norm_k_.is_empty()) k = norm_k_(k);
  if (freqs.defined()) {
    q = apply_rotary_emb_complex(q, freqs);
    k = apply_rotary_emb_complex(k, freqs);
  }
  // diffusers' native backend: the key mask [B, N] as [B, 1, 1, N].
  return attend(q, k, v, mask.defined() ? mask.unsqueeze(1).unsqueeze(1) : at::Tensor());
}

// Ref: diffusers/models/transformers/transformer_flux.py FluxAttnProcessor (no encoder_hidden_states)
at::Tensor JointAttentionImpl::forward_real_rope(const at::Tensor& x, const RotaryCosSin& freqs,
                                                 const at::Tensor& attn_mask) {
  auto split_heads = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };  // [B, N, h, d]
  at::Tensor q = split_heads(to_q_(x)), k = split_heads(to_k_(x)), v = split_heads(to_v_(x));
  if (!norm_q_.is_empty()) q = norm_q_(q);
  if (!norm_k_.is_empty()) k = norm_k_(k);
  return attend(apply_rotary_emb_real(q, freqs), apply_rotary_emb_real(k, freqs), v, attn_mask);
}

at::Tensor JointAttentionImpl::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& attn_mask) {
  const at::ScalarType dtype = q.scalar_type();
  // diffusers' native backend: [B, N, h, d] permuted to [B, h, N, d] views.
  at::Tensor out =
      dot_product_attention(q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}), attn_mask);
  out = out.permute({0, 2, 1, 3}).flatten(2, 3).to(dtype);  // [B, N, h * d]
  return to_out_0_.is_empty() ? out : to_out_0_(out);
}

// Ref: diffusers/models/attention_processor.py Attention (added_kv_proj_dim, context_pre_only
// False, qk_norm "rms_norm") and diffusers/models/transformers/transformer_qwenimage.py
// QwenDoubleStreamAttnProcessor2_0; SD3's: diffusers/models/attention_processor.py JointAttnProcessor2_0
DoubleStreamAttentionImpl::DoubleStreamAttentionImpl(const JointAttentionOptions& options,
                                                     const at::TensorOptions& tensor_options)
    : heads_(options.heads), text_first_(options.text_first) {
  const int64_t inner_dim = options.heads * options.dim_head;
  auto linear = [&](const char* name, int64_t in, int64_t out, bool bias) {
    return register_module(name, Linear(in, out, bias, tensor_options));
  };
  auto norm = [&](const char* name) {
    return register_module(
        name, RMSNorm(options.dim_head, options.qk_norm_eps, true, tensor_options, options.qk_norm_kind));
  };
  to_q_ = linear("to_q", options.dim, inner_dim, options.bias);
  to_k_ = linear("to_k", options.dim, inner_dim, options.bias);
  to_v_ = linear("to_v", options.dim, inner_dim, options.bias);
  add_q_proj_ = linear("add_q_proj", options.dim, inner_dim, options.bias);
  add_k_proj_ = linear("add_k_proj", options.dim, inner_dim, options.bias);
  add_v_proj_ = linear("add_v_proj", options.dim, inner_dim, options.bias);
  if (options.qk_norm) {
    norm_q_ = norm("norm_q");
    norm_k_ = norm("norm_k");
    norm_added_q_ = norm("norm_added_q");
    norm_added_k_ = norm("norm_added_k");
  }
  to_out_0_ = Linear(inner_dim, options.dim, options.out_bias, tensor_options);
  register_module("to_out", torch::nn::ModuleList(to_out_0_));  // to_out.1 is Dropout
  if (!options.context_pre_only) to_add_out_ = linear("to_add_out", inner_dim, options.dim, options.out_bias);
}

DoubleStreamAttentionImpl::Projected DoubleStreamAttentionImpl::project(const at::Tensor& image,
                                                                       const at::Tensor& text) {
  auto split_heads = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };  // [B, N, h, d]
  Projected p{split_heads(to_q_(image)),      split_heads(to_k_(image)),      split_heads(to_v_(image)),
              split_heads(add_q_proj_(text)), split_heads(add_k_proj_(text)), split_heads(add_v_proj_(text))};
  if (!norm_q_.is_empty()) {
    p.img_q = norm_q_(p.img_q);
    p.img_k = norm_k_(p.img_k);
    p.txt_q = norm_added_q_(p.txt_q);
    p.txt_k = norm_added_k_(p.txt_k);
  }
  return p;
}

DoubleStreamAttentionImpl::Output DoubleStreamAttentionImpl::attend(const at::Tensor& q, const at::Tensor& k,
                                                                    const at::Tensor& v, const at::Tensor& attn_mask,
                                                                    int64_t n_txt) {
  // diffusers' native backend: [B, N, h, d] permuted to [B, h, N, d] views.
  at::Tensor out =
      dot_product_attention(q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}), attn_mask);
  out = out.permute({0, 2, 1, 3}).flatten(2, 3).to(q.scalar_type());  // [B, N_txt + N_img, h * d]
  const at::Tensor text_out = out.narrow(1, 0, n_txt);
  return {to_out_0_(out.narrow(1, n_txt, out.size(1) - n_txt)),
          to_add_out_.is_empty() ? at::Tensor() : to_add_out_(text_out)};
}

// Ref: diffusers/models/attention_processor.py JointAttnProcessor2_0 (SD3): each stream turned
// heads-first ([B, h, N, d] views) and concatenated along the sequence as [image, text] into
// contiguous tensors, so that SDPA sees the processor's own layout and strides.
DoubleStreamAttentionImpl::Output DoubleStreamAttentionImpl::attend_image_first(const Projected& p,
                                                                                const at::Tensor& mask) {
  auto heads_first = [](const at::Tensor& t) { return t.transpose(1, 2); };
  const at::Tensor q = at::cat({heads_first(p.img_q), heads_first(p.txt_q)}, 2);
  const at::Tensor k = at::cat({heads_first(p.img_k), heads_first(p.txt_k)}, 2);
  const at::Tensor v = at::cat({heads_first(p.img_v), heads_first(p.txt_v)}, 2);
  at::Tensor out = dot_product_attention(q, k, v, mask.defined() ? mask.unsqueeze(1).unsqueeze(1) : at::Tensor());
  out = out.permute({0, 2, 1, 3}).flatten(2, 3).to(p.img_q.scalar_type());  // [B, N_img + N_txt, h * d]
  const int64_t n_img = p.img_q.size(1), n_txt = p.txt_q.size(1);
  const at::Tensor text_out = out.narrow(1, n_img, n_txt);
  return {to_out_0_(out.narrow(1, 0, n_img)), to_add_out_.is_empty() ? at::Tensor() : to_add_out_(text_out)};
}

DoubleStreamAttentionImpl::Output DoubleStreamAttentionImpl::forward(const at::Tensor& image, const at::Tensor& text,
                                                                     const at::Tensor& image_freqs,
                                                                     const at::Tensor& text_freqs,
                                                                     const at::Tensor& mask) {
  Projected p = project(image, text);
  if (image_freqs.defined()) {
    // apply_rotary_emb_qwen(use_real=False): freqs [N, d/2] broadcast over the batch and the heads.
    const at::Tensor img_f = image_freqs.unsqueeze(0), txt_f = text_freqs.unsqueeze(0);  // [1, N, d/2]
    p.img_q = apply_rotary_emb_complex(p.img_q, img_f);
    p.img_k = apply_rotary_emb_complex(p.img_k, img_f);
    p.txt_q = apply_rotary_emb_complex(p.txt_q, txt_f);
    p.txt_k = apply_rotary_emb_complex(p.txt_k, txt_f);
  }
  if (!text_first_) return attend_image_first(p, mask);
  // diffusers' native backend: the key mask [B, N] as [B, 1, 1, N].
  return attend(at::cat({p.txt_q, p.img_q}, 1), at::cat({p.txt_k, p.img_k}, 1), at::cat({p.txt_v, p.img_v}, 1),
                mask.defined() ? mask.unsqueeze(1).unsqueeze(1) : at::Tensor(), text.size(1));
}

// Ref: diffusers/models/transformers/transformer_flux.py FluxAttnProcessor (with encoder_hidden_states)
DoubleStreamAttentionImpl::Output DoubleStreamAttentionImpl::forward_real_rope(const at::Tensor& image,
                                                                               const at::Tensor& text,
                                                                               const RotaryCosSin& freqs,
                                                                               const at::Tensor& attn_mask) {
  const Projected p = project(image, text);
  const at::Tensor q = apply_rotary_emb_real(at::cat({p.txt_q, p.img_q}, 1), freqs);
  const at::Tensor k = apply_rotary_emb_real(at::cat({p.txt_k, p.img_k}, 1), freqs);
  return attend(q, k, at::cat({p.txt_v, p.img_v}, 1), attn_mask, text.size(1));
}

}  // namespace dpinfer::pipeline::nn

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
    norm_q_ = register_module("norm_q", RMSNorm(options.dim_head, options.qk_norm_eps, true, tensor_options));
    norm_k_ = register_module("norm_k", RMSNorm(options.dim_head, options.qk_norm_eps, true, tensor_options));
  }
  to_out_0_ = Linear(inner_dim, options.dim, options.out_bias, tensor_options);
  register_module("to_out", torch::nn::ModuleList(to_out_0_));  // to_out.1 is Dropout
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
  const at::ScalarType dtype = q.scalar_type();
  // diffusers' native backend: [B, N, h, d] permuted to [B, h, N, d] views, the mask [B, 1, 1, N].
  at::Tensor out = dot_product_attention(q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}),
                                         mask.defined() ? mask.unsqueeze(1).unsqueeze(1) : at::Tensor());
  out = out.permute({0, 2, 1, 3}).flatten(2, 3).to(dtype);  // [B, N, h * d]
  return to_out_0_(out);
}

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/attention.h"

namespace dpinfer::pipeline::nn {

// Ref: torch.nn.functional.scaled_dot_product_attention, as diffusers' processors call it.
at::Tensor dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask) {
  return mask.defined() ? at::scaled_dot_product_attention(q, k, v, mask) : at::scaled_dot_product_attention(q, k, v);
}

// Ref: diffusers/models/attention_processor.py Attention and AttnProcessor2_0
AttentionImpl::AttentionImpl(const AttentionOptions& options, const at::TensorOptions& tensor_options)
    : heads_(options.heads),
      residual_connection_(options.residual_connection),
      rescale_output_factor_(options.rescale_output_factor) {
  const int64_t inner_dim = options.heads * options.dim_head;
  const int64_t kv_dim = options.cross_attention_dim.value_or(options.query_dim);
  if (options.norm_num_groups)
    group_norm_ = register_module("group_norm",
                                  GroupNorm(*options.norm_num_groups, options.query_dim, options.eps, tensor_options));
  to_q_ = register_module("to_q", Linear(options.query_dim, inner_dim, options.bias, tensor_options));
  to_k_ = register_module("to_k", Linear(kv_dim, inner_dim, options.bias, tensor_options));
  to_v_ = register_module("to_v", Linear(kv_dim, inner_dim, options.bias, tensor_options));
  to_out_0_ = Linear(inner_dim, options.query_dim, true, tensor_options);
  register_module("to_out", torch::nn::ModuleList(to_out_0_));  // to_out.1 is Dropout
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& context) {
  const bool spatial = x.dim() == 4;
  at::Tensor h = spatial ? x.reshape({x.size(0), x.size(1), -1}).transpose(1, 2) : x;  // [B, N, C]
  if (!group_norm_.is_empty()) h = group_norm_(h.transpose(1, 2)).transpose(1, 2);
  const at::Tensor& kv = context.defined() ? context : h;
  const int64_t batch = h.size(0);
  at::Tensor q = to_q_(h), k = to_k_(kv), v = to_v_(kv);
  const int64_t head_dim = k.size(-1) / heads_;
  auto split_heads = [&](const at::Tensor& t) { return t.view({batch, -1, heads_, head_dim}).transpose(1, 2); };
  at::Tensor out = dot_product_attention(split_heads(q), split_heads(k), split_heads(v));  // [B, h, N, d]
  out = out.transpose(1, 2).reshape({batch, -1, heads_ * head_dim}).to(q.scalar_type());
  out = to_out_0_(out);  // [B, N, query_dim]
  if (spatial) out = out.transpose(-1, -2).reshape(x.sizes());
  if (residual_connection_) out = out + x;
  if (rescale_output_factor_ != 1.0) out = out / rescale_output_factor_;
  return out;
}

// Ref: transformers/integrations/sdpa_attention.py sdpa_attention_forward, repeat_kv, use_gqa_in_sdpa;
// transformers/masking_utils.py sdpa_mask_recent_torch, _ignore_causal_mask_sdpa
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& key_padding_mask, double scale) {
  const int64_t heads = q.size(1), kv_heads = k.size(1);
  TORCH_CHECK(heads % kv_heads == 0, "causal_attention: ", heads, " query heads for ", kv_heads, " key heads");
  // transformers drops a mask with no padding anywhere in the batch (padding_mask.all()) and
  // lets SDPA apply causality itself, with the key heads shared by enable_gqa.
  if (!key_padding_mask.defined() || key_padding_mask.ne(0).all().item<bool>())
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true, scale,
                                            /*enable_gqa=*/true);
  const int64_t batch = q.size(0), length = q.size(2);
  // repeat_kv: [B, H_kv, L, D] -> [B, H_kv, n, L, D] -> [B, H, L, D], each key head n times in a row.
  auto repeat = [&](const at::Tensor& t) {
    if (heads == kv_heads) return t;
    return t.unsqueeze(2).expand({batch, kv_heads, heads / kv_heads, length, t.size(-1)}).reshape(
        {batch, heads, length, t.size(-1)});
  };
  at::Tensor causal = at::ones({length, length}, key_padding_mask.options().dtype(at::kBool)).tril();  // [L, L]
  at::Tensor mask = causal.unsqueeze(0) & key_padding_mask.ne(0).unsqueeze(1);                          // [B, L, L]
  return at::scaled_dot_product_attention(q, repeat(k), repeat(v), mask.unsqueeze(1), 0.0, /*is_causal=*/false, scale,
                                          /*enable_gqa=*/false);
}

}  // namespace dpinfer::pipeline::nn

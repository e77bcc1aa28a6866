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

}  // namespace dpinfer::pipeline::nn

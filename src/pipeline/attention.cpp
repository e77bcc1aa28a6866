#include "dpinfer/pipeline/attention.h"

namespace dpinfer::pipeline {

// Ref: diffusers/models/attention_processor.py Attention and AttnProcessor2_0
AttentionImpl::AttentionImpl(const AttentionOptions& options)
    : heads_(options.heads),
      residual_connection_(options.residual_connection),
      rescale_output_factor_(options.rescale_output_factor) {
  const int64_t inner_dim = options.heads * options.dim_head;
  const int64_t kv_dim = options.cross_attention_dim.value_or(options.query_dim);
  if (options.norm_num_groups)
    group_norm_ = register_module(
        "group_norm",
        torch::nn::GroupNorm(torch::nn::GroupNormOptions(*options.norm_num_groups, options.query_dim).eps(options.eps)));
  auto linear = [](int64_t in, int64_t out, bool bias) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  to_q_ = register_module("to_q", linear(options.query_dim, inner_dim, options.bias));
  to_k_ = register_module("to_k", linear(kv_dim, inner_dim, options.bias));
  to_v_ = register_module("to_v", linear(kv_dim, inner_dim, options.bias));
  to_out_0_ = linear(inner_dim, options.query_dim, true);
  to_out_ = register_module("to_out", torch::nn::ModuleList(to_out_0_));  // to_out.1 is Dropout
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
  at::Tensor out = at::scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v));  // [B, h, N, d]
  out = out.transpose(1, 2).reshape({batch, -1, heads_ * head_dim}).to(q.scalar_type());
  out = to_out_0_(out);  // [B, N, query_dim]
  if (spatial) out = out.transpose(-1, -2).reshape(x.sizes());
  if (residual_connection_) out = out + x;
  if (rescale_output_factor_ != 1.0) out = out / rescale_output_factor_;
  return out;
}

// Ref: diffusers/models/activations.py GEGLU
GEGLUImpl::GEGLUImpl(int64_t dim_in, int64_t dim_out) {
  proj_ = register_module("proj", torch::nn::Linear(dim_in, dim_out * 2));
}

at::Tensor GEGLUImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> parts = proj_(x).chunk(2, -1);
  return parts[0] * at::gelu(parts[1]);
}

// Ref: diffusers/models/attention.py FeedForward
FeedForwardImpl::FeedForwardImpl(int64_t dim) {
  const int64_t inner_dim = 4 * dim;
  geglu_ = GEGLU(dim, inner_dim);
  out_ = torch::nn::Linear(inner_dim, dim);
  // net.1 is Dropout: an Identity keeps net.2's index.
  register_module("net", torch::nn::ModuleList(geglu_, torch::nn::Identity(), out_));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) { return out_(geglu_(x)); }

// Ref: diffusers/models/attention.py BasicTransformerBlock
BasicTransformerBlockImpl::BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t dim_head,
                                                     int64_t cross_attention_dim, bool only_cross_attention)
    : only_cross_attention_(only_cross_attention) {
  auto layer_norm = [&] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5)); };
  AttentionOptions self_attention;
  self_attention.query_dim = dim;
  self_attention.heads = heads;
  self_attention.dim_head = dim_head;
  if (only_cross_attention) self_attention.cross_attention_dim = cross_attention_dim;
  AttentionOptions cross_attention = self_attention;
  cross_attention.cross_attention_dim = cross_attention_dim;
  norm1_ = register_module("norm1", layer_norm());
  attn1_ = register_module("attn1", Attention(self_attention));
  norm2_ = register_module("norm2", layer_norm());
  attn2_ = register_module("attn2", Attention(cross_attention));
  norm3_ = register_module("norm3", layer_norm());
  ff_ = register_module("ff", FeedForward(dim));
}

at::Tensor BasicTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& context) {
  at::Tensor h = attn1_(norm1_(x), only_cross_attention_ ? context : at::Tensor()) + x;
  h = attn2_(norm2_(h), context) + h;
  return ff_(norm3_(h)) + h;
}

// Ref: diffusers/models/transformers/transformer_2d.py Transformer2DModel (continuous input)
Transformer2DModelImpl::Transformer2DModelImpl(const Transformer2DOptions& options)
    : use_linear_projection_(options.use_linear_projection) {
  const int64_t channels = options.in_channels;
  const int64_t dim_head = channels / options.heads;
  const int64_t inner_dim = options.heads * dim_head;
  norm_ = register_module(
      "norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(options.norm_num_groups, channels).eps(1e-6)));
  if (use_linear_projection_) {
    proj_in_linear_ = register_module("proj_in", torch::nn::Linear(channels, inner_dim));
  } else {
    proj_in_conv_ = register_module("proj_in", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, inner_dim, 1)));
  }
  transformer_blocks_ = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.num_layers; ++i)
    transformer_blocks_->push_back(BasicTransformerBlock(inner_dim, options.heads, dim_head,
                                                         options.cross_attention_dim, options.only_cross_attention));
  if (use_linear_projection_) {
    proj_out_linear_ = register_module("proj_out", torch::nn::Linear(inner_dim, channels));
  } else {
    proj_out_conv_ = register_module("proj_out", torch::nn::Conv2d(torch::nn::Conv2dOptions(inner_dim, channels, 1)));
  }
}

at::Tensor Transformer2DModelImpl::forward(const at::Tensor& x, const at::Tensor& context) {
  const int64_t batch = x.size(0), height = x.size(2), width = x.size(3);
  at::Tensor h = norm_(x);
  auto to_tokens = [&](const at::Tensor& t) {
    return t.permute({0, 2, 3, 1}).reshape({batch, height * width, t.size(1)});  // [B, HW, C]
  };
  auto to_image = [&](const at::Tensor& t) {
    return t.reshape({batch, height, width, t.size(-1)}).permute({0, 3, 1, 2}).contiguous();  // [B, C, H, W]
  };
  h = use_linear_projection_ ? proj_in_linear_(to_tokens(h)) : to_tokens(proj_in_conv_(h));
  for (const auto& block : *transformer_blocks_) h = block->as<BasicTransformerBlockImpl>()->forward(h, context);
  h = use_linear_projection_ ? to_image(proj_out_linear_(h)) : proj_out_conv_(to_image(h));
  return h + x;
}

}  // namespace dpinfer::pipeline

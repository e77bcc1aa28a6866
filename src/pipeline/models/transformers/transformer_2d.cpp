#include "dpinfer/pipeline/models/transformers/transformer_2d.h"

namespace dpinfer::pipeline {

// Ref: diffusers/models/attention.py BasicTransformerBlock
BasicTransformerBlockImpl::BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t dim_head,
                                                     int64_t cross_attention_dim, bool only_cross_attention,
                                                     const at::TensorOptions& options)
    : only_cross_attention_(only_cross_attention) {
  auto layer_norm = [&] { return nn::LayerNorm(dim, 1e-5, true, options); };
  nn::AttentionOptions self_attention;
  self_attention.query_dim = dim;
  self_attention.heads = heads;
  self_attention.dim_head = dim_head;
  if (only_cross_attention) self_attention.cross_attention_dim = cross_attention_dim;
  nn::AttentionOptions cross_attention = self_attention;
  cross_attention.cross_attention_dim = cross_attention_dim;
  norm1_ = register_module("norm1", layer_norm());
  attn1_ = register_module("attn1", nn::Attention(self_attention, options));
  norm2_ = register_module("norm2", layer_norm());
  attn2_ = register_module("attn2", nn::Attention(cross_attention, options));
  norm3_ = register_module("norm3", layer_norm());
  ff_ = register_module("ff", nn::FeedForward(dim, options));
}

at::Tensor BasicTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& context) {
  at::Tensor h = attn1_(norm1_(x), only_cross_attention_ ? context : at::Tensor()) + x;
  h = attn2_(norm2_(h), context) + h;
  return ff_(norm3_(h)) + h;
}

// Ref: diffusers/models/transformers/transformer_2d.py Transformer2DModel (continuous input)
Transformer2DModelImpl::Transformer2DModelImpl(const Transformer2DOptions& options,
                                               const at::TensorOptions& tensor_options)
    : use_linear_projection_(options.use_linear_projection) {
  const int64_t channels = options.in_channels;
  const int64_t dim_head = channels / options.heads;
  const int64_t inner_dim = options.heads * dim_head;
  norm_ = register_module("norm", nn::GroupNorm(options.norm_num_groups, channels, 1e-6, tensor_options));
  if (use_linear_projection_) {
    proj_in_linear_ = register_module("proj_in", nn::Linear(channels, inner_dim, true, tensor_options));
  } else {
    proj_in_conv_ = register_module("proj_in", nn::Conv2d(channels, inner_dim, 1, 1, 0, true, tensor_options));
  }
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.num_layers; ++i) {
    transformer_blocks_.push_back(BasicTransformerBlock(inner_dim, options.heads, dim_head,
                                                        options.cross_attention_dim, options.only_cross_attention,
                                                        tensor_options));
    blocks->push_back(transformer_blocks_.back());
  }
  if (use_linear_projection_) {
    proj_out_linear_ = register_module("proj_out", nn::Linear(inner_dim, channels, true, tensor_options));
  } else {
    proj_out_conv_ = register_module("proj_out", nn::Conv2d(inner_dim, channels, 1, 1, 0, true, tensor_options));
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
  for (auto& block : transformer_blocks_) h = block(h, context);
  h = use_linear_projection_ ? to_image(proj_out_linear_(h)) : proj_out_conv_(to_image(h));
  return h + x;
}

}  // namespace dpinfer::pipeline

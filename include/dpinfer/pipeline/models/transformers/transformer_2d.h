#pragma once
// The spatial transformer of the SD and SDXL UNets: diffusers' Transformer2DModel on
// continuous input, made of BasicTransformerBlocks.

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/nn/attention.h"
#include "dpinfer/pipeline/nn/feed_forward.h"
#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline {

/// diffusers' BasicTransformerBlock with norm_type "layer_norm":
/// x += attn1(norm1(x)); x += attn2(norm2(x), context); x += ff(norm3(x)).
/// With only_cross_attention, attn1 attends to the context too.
class BasicTransformerBlockImpl : public torch::nn::Module {
 public:
  BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t dim_head, int64_t cross_attention_dim,
                            bool only_cross_attention, const at::TensorOptions& options);

  /// x [B, N, dim], context [B, M, cross_attention_dim] to [B, N, dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context);

 private:
  bool only_cross_attention_;
  nn::LayerNorm norm1_{nullptr}, norm2_{nullptr}, norm3_{nullptr};
  nn::Attention attn1_{nullptr}, attn2_{nullptr};
  nn::FeedForward ff_{nullptr};
};
TORCH_MODULE(BasicTransformerBlock);

/// What a Transformer2DModel (continuous input) is built from.
struct Transformer2DOptions {
  int64_t in_channels = 0;
  int64_t heads = 8;
  int64_t num_layers = 1;
  int64_t cross_attention_dim = 768;
  int64_t norm_num_groups = 32;
  /// Linear proj_in/proj_out on [B, HW, C] (SD 2.x, SDXL) instead of 1x1 convs (SD 1.x).
  bool use_linear_projection = false;
  bool only_cross_attention = false;
};

/// diffusers' Transformer2DModel on continuous input: GroupNorm "norm" (eps 1e-6),
/// proj_in, transformer_blocks, proj_out, plus the input. inner_dim = in_channels,
/// each head in_channels / heads wide.
class Transformer2DModelImpl : public torch::nn::Module {
 public:
  Transformer2DModelImpl(const Transformer2DOptions& options, const at::TensorOptions& tensor_options);

  /// x [B, C, H, W], context [B, M, cross_attention_dim] to [B, C, H, W].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context);

 private:
  bool use_linear_projection_;
  nn::GroupNorm norm_{nullptr};
  nn::Conv2d proj_in_conv_{nullptr}, proj_out_conv_{nullptr};
  nn::Linear proj_in_linear_{nullptr}, proj_out_linear_{nullptr};
  std::vector<BasicTransformerBlock> transformer_blocks_;
};
TORCH_MODULE(Transformer2DModel);

}  // namespace dpinfer::pipeline

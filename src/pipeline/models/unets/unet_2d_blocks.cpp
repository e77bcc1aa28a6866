#include "dpinfer/pipeline/models/unets/unet_2d_blocks.h"

#include <memory>

namespace dpinfer::pipeline {
namespace {

using nn::Attention;
using nn::AttentionOptions;
using nn::Downsample2D;
using nn::ResnetBlock2D;
using nn::ResnetBlock2DOptions;
using nn::Upsample2D;

ResnetBlock2DOptions resnet_options(const UNetBlockOptions& o, int64_t in_channels, int64_t out_channels) {
  ResnetBlock2DOptions r;
  r.in_channels = in_channels;
  r.out_channels = out_channels;
  r.temb_channels = o.temb_channels;
  r.groups = o.groups;
  r.eps = o.eps;
  r.output_scale_factor = o.output_scale_factor;
  return r;
}

ResnetBlock2DOptions decoder_resnet_options(int64_t in_channels, int64_t out_channels, int64_t groups, double eps,
                                            bool contiguous_shortcut_input) {
  ResnetBlock2DOptions r;
  r.in_channels = in_channels;
  r.out_channels = out_channels;
  r.groups = groups;
  r.eps = eps;
  r.contiguous_shortcut_input = contiguous_shortcut_input;
  return r;
}

Transformer2DOptions transformer_options(const CrossAttentionOptions& a, int64_t channels, int64_t groups) {
  Transformer2DOptions t;
  t.in_channels = channels;
  t.heads = a.heads;
  t.num_layers = a.transformer_layers;
  t.cross_attention_dim = a.cross_attention_dim;
  t.norm_num_groups = groups;
  t.use_linear_projection = a.use_linear_projection;
  t.only_cross_attention = a.only_cross_attention;
  return t;
}

// Registers `module` as child `index` of `list` and keeps the typed handle.
template <typename Holder>
void add(const std::shared_ptr<torch::nn::ModuleListImpl>& list, std::vector<Holder>& typed, Holder module) {
  list->push_back(module);
  typed.push_back(std::move(module));
}

}  // namespace

// Ref: diffusers/models/unets/unet_2d_blocks.py CrossAttnDownBlock2D and DownBlock2D
DownBlock2DImpl::DownBlock2DImpl(const UNetBlockOptions& options, const at::TensorOptions& t) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  std::shared_ptr<torch::nn::ModuleListImpl> attentions;
  if (options.attention) attentions = register_module("attentions", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.num_layers; ++i) {
    int64_t in = i == 0 ? options.in_channels : options.out_channels;
    add(resnets, resnets_, ResnetBlock2D(resnet_options(options, in, options.out_channels), t));
    if (options.attention)
      add(attentions, attentions_,
          Transformer2DModel(transformer_options(*options.attention, options.out_channels, options.groups), t));
  }
  if (options.add_sampler) {
    downsampler_ = Downsample2D(options.out_channels, options.downsample_padding, t);
    register_module("downsamplers", torch::nn::ModuleList(downsampler_));
  }
}

at::Tensor DownBlock2DImpl::forward_layers(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context,
                                           std::vector<at::Tensor>& skips, int64_t layers) {
  at::Tensor h = x;
  for (size_t i = 0; i < resnets_.size() && static_cast<int64_t>(i) < layers; ++i) {
    h = resnets_[i](h, temb);
    if (!attentions_.empty()) h = attentions_[i](h, context);
    skips.push_back(h);
  }
  return h;
}

at::Tensor DownBlock2DImpl::forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context,
                                    std::vector<at::Tensor>& skips) {
  at::Tensor h = forward_layers(x, temb, context, skips, num_layers());
  if (!downsampler_.is_empty()) {
    h = downsampler_(h);
    skips.push_back(h);
  }
  return h;
}

// Ref: diffusers/models/unets/unet_2d_blocks.py CrossAttnUpBlock2D and UpBlock2D
UpBlock2DImpl::UpBlock2DImpl(const UNetBlockOptions& options, const at::TensorOptions& t) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  std::shared_ptr<torch::nn::ModuleListImpl> attentions;
  if (options.attention) attentions = register_module("attentions", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.num_layers; ++i) {
    int64_t skip_channels = i == options.num_layers - 1 ? options.in_channels : options.out_channels;
    int64_t in = (i == 0 ? options.prev_output_channels : options.out_channels) + skip_channels;
    add(resnets, resnets_, ResnetBlock2D(resnet_options(options, in, options.out_channels), t));
    if (options.attention)
      add(attentions, attentions_,
          Transformer2DModel(transformer_options(*options.attention, options.out_channels, options.groups), t));
  }
  if (options.add_sampler) {
    upsampler_ = Upsample2D(options.out_channels, t);
    register_module("upsamplers", torch::nn::ModuleList(upsampler_));
  }
}

at::Tensor UpBlock2DImpl::forward(const at::Tensor& x, std::vector<at::Tensor>& skips, const at::Tensor& temb,
                                  const at::Tensor& context, const std::vector<int64_t>& upsample_size, int64_t from,
                                  at::Tensor* keep, int64_t keep_layer) {
  at::Tensor h = x;
  for (size_t i = static_cast<size_t>(from); i < resnets_.size(); ++i) {
    if (keep && static_cast<int64_t>(i) == keep_layer) *keep = h;
    at::Tensor skip = std::move(skips.back());
    skips.pop_back();
    h = resnets_[i](at::cat({h, skip}, 1), temb);
    if (!attentions_.empty()) h = attentions_[i](h, context);
  }
  if (!upsampler_.is_empty()) h = upsampler_(h, upsample_size);
  return h;
}

// Ref: diffusers/models/unets/unet_2d_blocks.py UNetMidBlock2DCrossAttn
UNetMidBlock2DCrossAttnImpl::UNetMidBlock2DCrossAttnImpl(const UNetBlockOptions& options, const at::TensorOptions& t) {
  const int64_t channels = options.in_channels;
  resnet_0_ = ResnetBlock2D(resnet_options(options, channels, channels), t);
  resnet_1_ = ResnetBlock2D(resnet_options(options, channels, channels), t);
  attention_ = Transformer2DModel(transformer_options(*options.attention, channels, options.groups), t);
  register_module("resnets", torch::nn::ModuleList(resnet_0_, resnet_1_));
  register_module("attentions", torch::nn::ModuleList(attention_));
}

at::Tensor UNetMidBlock2DCrossAttnImpl::forward(const at::Tensor& x, const at::Tensor& temb,
                                                const at::Tensor& context) {
  return resnet_1_(attention_(resnet_0_(x, temb), context), temb);
}

// Ref: diffusers/models/unets/unet_2d_blocks.py UNetMidBlock2D
UNetMidBlock2DImpl::UNetMidBlock2DImpl(const UNetMidBlock2DOptions& options, const at::TensorOptions& t) {
  ResnetBlock2DOptions r;
  r.in_channels = r.out_channels = options.in_channels;
  r.temb_channels = options.temb_channels;
  r.groups = options.groups;
  r.eps = options.eps;
  r.output_scale_factor = options.output_scale_factor;
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  std::shared_ptr<torch::nn::ModuleListImpl> attentions;
  if (options.add_attention && options.num_layers > 0)
    attentions = register_module("attentions", torch::nn::ModuleList());
  add(resnets, resnets_, ResnetBlock2D(r, t));
  for (int64_t i = 0; i < options.num_layers; ++i) {
    if (options.add_attention) {
      AttentionOptions a;
      a.query_dim = options.in_channels;
      a.heads = options.in_channels / options.attention_head_dim;
      a.dim_head = options.attention_head_dim;
      a.bias = true;
      a.norm_num_groups = options.groups;
      a.eps = options.eps;
      a.residual_connection = true;
      a.rescale_output_factor = options.output_scale_factor;
      add(attentions, attentions_, Attention(a, t));
    }
    add(resnets, resnets_, ResnetBlock2D(r, t));
  }
}

at::Tensor UNetMidBlock2DImpl::forward(const at::Tensor& x, const at::Tensor& temb) {
  at::Tensor h = resnets_[0](x, temb);
  for (size_t i = 1; i < resnets_.size(); ++i) {
    if (!attentions_.empty()) h = attentions_[i - 1](h);
    h = resnets_[i](h, temb);
  }
  return h;
}

// Ref: diffusers/models/unets/unet_2d_blocks.py DownEncoderBlock2D
DownEncoderBlock2DImpl::DownEncoderBlock2DImpl(int64_t num_layers, int64_t in_channels, int64_t out_channels,
                                               int64_t groups, double eps, bool add_downsample,
                                               const at::TensorOptions& t, bool contiguous_shortcut_input) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i < num_layers; ++i)
    add(resnets, resnets_,
        ResnetBlock2D(decoder_resnet_options(i == 0 ? in_channels : out_channels, out_channels, groups, eps,
                                             contiguous_shortcut_input),
                      t));
  if (add_downsample) {
    downsampler_ = Downsample2D(out_channels, 0, t);
    register_module("downsamplers", torch::nn::ModuleList(downsampler_));
  }
}

at::Tensor DownEncoderBlock2DImpl::forward(const at::Tensor& x) {
  at::Tensor h = x;
  for (auto& resnet : resnets_) h = resnet(h);
  return downsampler_.is_empty() ? h : downsampler_(h);
}

// Ref: diffusers/models/unets/unet_2d_blocks.py UpDecoderBlock2D
UpDecoderBlock2DImpl::UpDecoderBlock2DImpl(int64_t num_layers, int64_t in_channels, int64_t out_channels,
                                           int64_t groups, double eps, bool add_upsample,
                                           const at::TensorOptions& t, bool contiguous_shortcut_input) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i < num_layers; ++i)
    add(resnets, resnets_,
        ResnetBlock2D(decoder_resnet_options(i == 0 ? in_channels : out_channels, out_channels, groups, eps,
                                             contiguous_shortcut_input),
                      t));
  if (add_upsample) {
    upsampler_ = Upsample2D(out_channels, t);
    register_module("upsamplers", torch::nn::ModuleList(upsampler_));
  }
}

at::Tensor UpDecoderBlock2DImpl::forward(const at::Tensor& x) {
  at::Tensor h = x;
  for (auto& resnet : resnets_) h = resnet(h);
  return upsampler_.is_empty() ? h : upsampler_(h);
}

}  // namespace dpinfer::pipeline

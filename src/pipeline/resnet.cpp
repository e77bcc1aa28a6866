#include "dpinfer/pipeline/resnet.h"

namespace dpinfer::pipeline {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding));
}

torch::nn::GroupNorm group_norm(int64_t groups, int64_t channels, double eps) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(eps));
}

}  // namespace

// Ref: diffusers/models/resnet.py ResnetBlock2D
ResnetBlock2DImpl::ResnetBlock2DImpl(const ResnetBlock2DOptions& options)
    : output_scale_factor_(options.output_scale_factor) {
  norm1_ = register_module("norm1", group_norm(options.groups, options.in_channels, options.eps));
  conv1_ = register_module("conv1", conv(options.in_channels, options.out_channels, 3, 1, 1));
  if (options.temb_channels)
    time_emb_proj_ = register_module("time_emb_proj", torch::nn::Linear(*options.temb_channels, options.out_channels));
  norm2_ = register_module("norm2", group_norm(options.groups, options.out_channels, options.eps));
  // "dropout" sits here in diffusers: identity at inference, no parameters.
  conv2_ = register_module("conv2", conv(options.out_channels, options.out_channels, 3, 1, 1));
  if (options.in_channels != options.out_channels)
    conv_shortcut_ = register_module("conv_shortcut", conv(options.in_channels, options.out_channels, 1));
}

at::Tensor ResnetBlock2DImpl::forward(const at::Tensor& x, const at::Tensor& temb) {
  at::Tensor h = conv1_(at::silu(norm1_(x)));
  if (!time_emb_proj_.is_empty() && temb.defined()) h = h + time_emb_proj_(at::silu(temb)).unsqueeze(-1).unsqueeze(-1);
  h = conv2_(at::silu(norm2_(h)));
  at::Tensor shortcut = conv_shortcut_.is_empty() ? x : conv_shortcut_(x.contiguous());
  at::Tensor out = shortcut + h;
  return output_scale_factor_ == 1.0 ? out : out / output_scale_factor_;
}

// Ref: diffusers/models/downsampling.py Downsample2D
Downsample2DImpl::Downsample2DImpl(int64_t channels, int64_t padding) : padding_(padding) {
  conv_ = register_module("conv", conv(channels, channels, 3, 2, padding));
}

at::Tensor Downsample2DImpl::forward(const at::Tensor& x) {
  if (padding_ == 0) return conv_(at::constant_pad_nd(x, {0, 1, 0, 1}, 0));
  return conv_(x);
}

// Ref: diffusers/models/upsampling.py Upsample2D
Upsample2DImpl::Upsample2DImpl(int64_t channels) {
  conv_ = register_module("conv", conv(channels, channels, 3, 1, 1));
}

at::Tensor Upsample2DImpl::forward(const at::Tensor& x, const std::vector<int64_t>& output_size) {
  // The same ATen overload F.interpolate(mode="nearest") calls, with a scale factor or a size.
  at::Tensor up = output_size.empty()
                      ? at::upsample_nearest2d(x, std::nullopt, std::vector<double>{2.0, 2.0})
                      : at::upsample_nearest2d(x, at::IntArrayRef(output_size), std::nullopt);
  return conv_(up);
}

}  // namespace dpinfer::pipeline

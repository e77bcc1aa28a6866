#include "dpinfer/pipeline/nn/resnet.h"

namespace dpinfer::pipeline::nn {

// Ref: diffusers/models/resnet.py ResnetBlock2D
ResnetBlock2DImpl::ResnetBlock2DImpl(const ResnetBlock2DOptions& options, const at::TensorOptions& tensor_options)
    : output_scale_factor_(options.output_scale_factor), contiguous_shortcut_input_(options.contiguous_shortcut_input) {
  const at::TensorOptions& t = tensor_options;
  norm1_ = register_module("norm1", GroupNorm(options.groups, options.in_channels, options.eps, t));
  conv1_ = register_module("conv1", Conv2d(options.in_channels, options.out_channels, 3, 1, 1, true, t));
  if (options.temb_channels)
    time_emb_proj_ = register_module("time_emb_proj", Linear(*options.temb_channels, options.out_channels, true, t));
  norm2_ = register_module("norm2", GroupNorm(options.groups, options.out_channels, options.eps, t));
  // "dropout" sits here in diffusers: identity at inference, no parameters.
  conv2_ = register_module("conv2", Conv2d(options.out_channels, options.out_channels, 3, 1, 1, true, t));
  if (options.in_channels != options.out_channels)
    conv_shortcut_ = register_module("conv_shortcut", Conv2d(options.in_channels, options.out_channels, 1, 1, 0, true, t));
}

at::Tensor ResnetBlock2DImpl::forward(const at::Tensor& x, const at::Tensor& temb) {
  at::Tensor h = conv1_(at::silu(norm1_(x)));
  if (!time_emb_proj_.is_empty() && temb.defined()) h = h + time_emb_proj_(at::silu(temb)).unsqueeze(-1).unsqueeze(-1);
  h = conv2_(at::silu(norm2_(h)));
  at::Tensor shortcut =
      conv_shortcut_.is_empty() ? x : conv_shortcut_(contiguous_shortcut_input_ ? x.contiguous() : x);
  at::Tensor out = shortcut + h;
  return output_scale_factor_ == 1.0 ? out : out / output_scale_factor_;
}

// Ref: diffusers/models/downsampling.py Downsample2D
Downsample2DImpl::Downsample2DImpl(int64_t channels, int64_t padding, const at::TensorOptions& options)
    : padding_(padding) {
  conv_ = register_module("conv", Conv2d(channels, channels, 3, 2, padding, true, options));
}

at::Tensor Downsample2DImpl::forward(const at::Tensor& x) {
  if (padding_ == 0) return conv_(at::constant_pad_nd(x, {0, 1, 0, 1}, 0));
  return conv_(x);
}

// Ref: diffusers/models/upsampling.py Upsample2D
Upsample2DImpl::Upsample2DImpl(int64_t channels, const at::TensorOptions& options) {
  conv_ = register_module("conv", Conv2d(channels, channels, 3, 1, 1, true, options));
}

at::Tensor Upsample2DImpl::forward(const at::Tensor& x, const std::vector<int64_t>& output_size) {
  // The same ATen overload F.interpolate(mode="nearest") calls, with a scale factor or a size.
  at::Tensor up = output_size.empty()
                      ? at::upsample_nearest2d(x, std::nullopt, std::vector<double>{2.0, 2.0})
                      : at::upsample_nearest2d(x, at::IntArrayRef(output_size), std::nullopt);
  return conv_(up);
}

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image.h"

#include <algorithm>
#include <cmath>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/pipeline/models/autoencoders/vae_tiling.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

/// A k x k x k causal conv with "same" padding (diffusers' `QwenImageCausalConv3d(in, out, k, padding=k // 2)`).
QwenImageCausalConv3d causal_conv(int64_t in, int64_t out, int64_t kernel, const at::TensorOptions& options) {
  return QwenImageCausalConv3d(in, out, kernel, kernel, kernel / 2, kernel / 2, options);
}

}  // namespace

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageCausalConv3d
QwenImageCausalConv3dImpl::QwenImageCausalConv3dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_t,
                                                     int64_t kernel_s, int64_t pad_t, int64_t pad_s,
                                                     const at::TensorOptions& options)
    : pad_s_(pad_s) {
  // With 2 * pad_t zero frames in front of one frame, output frame 0 sees the data frame through
  // the last time slice only, and the conv yields exactly one frame.
  TORCH_CHECK(kernel_t == 2 * pad_t + 1, "QwenImageCausalConv3d: time kernel ", kernel_t, " with time padding ", pad_t,
              " does not map one frame to one frame");
  weight = register_parameter(
      "weight", at::empty({out_channels, in_channels, kernel_t, kernel_s, kernel_s}, options), false);
  bias = register_parameter("bias", at::empty({out_channels}, options), false);
}

at::Tensor QwenImageCausalConv3dImpl::forward(const at::Tensor& x) const {
  // diffusers' F.pad hands conv3d a contiguous tensor even when x is channels-last in memory (as
  // the mid block's attention leaves it); a channels-last input would take another CPU kernel
  // path, which sums in another order. The zero frames add exact zeros, so on CPU this equals
  // diffusers' conv3d bit for bit (checked on the fixtures and a Qwen-Image-shaped decoder).
  if (channels_last_) {
    // A channels-last input (the encoder's first level): here oneDNN's channels_last_3d conv3d sums in
    // another order than any 2D convolution of the kernel's last slice, or a conv3d of that slice alone,
    // in bf16 (traced layer by layer on the fixtures). So diffusers' own call: the frame after its
    // 2 * pad_t zero frames, channels-last, through the whole kernel; 3x the multiply-adds of the first
    // level, as diffusers spends them.
    const at::Tensor frames = at::constant_pad_nd(x.contiguous(at::MemoryFormat::ChannelsLast).unsqueeze(2),
                                                  {pad_s_, pad_s_, pad_s_, pad_s_, weight.size(2) - 1, 0});
    return at::conv3d(frames, weight, bias).squeeze(2);
  }
  return at::conv2d(x.contiguous(), weight.select(2, -1), bias, /*stride=*/{1, 1}, /*padding=*/{pad_s_, pad_s_});
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageRMS_norm
QwenImageRMSNormImpl::QwenImageRMSNormImpl(int64_t dim, bool images, const at::TensorOptions& options)
    : dim_(dim), scale_(std::sqrt(static_cast<double>(dim))) {
  gamma = register_parameter(
      "gamma", images ? at::empty({dim, 1, 1}, options) : at::empty({dim, 1, 1, 1}, options), false);
}

at::Tensor QwenImageRMSNormImpl::forward(const at::Tensor& x) const {
  // F.normalize(x, dim=1): x / max(||x||_2 over channels, 1e-12), the norm by linalg.vector_norm
  // as torch.norm dispatches it. diffusers then adds `bias`, the float 0.0 when bias=False, which
  // changes nothing but the sign of a zero: skipped.
  const at::Tensor denom = at::linalg_vector_norm(x, 2.0, {1}, /*keepdim=*/true).clamp_min(1e-12).expand_as(x);
  return x / denom * scale_ * gamma.view({dim_, 1, 1});
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageResidualBlock
QwenImageResidualBlockImpl::QwenImageResidualBlockImpl(int64_t in_dim, int64_t out_dim,
                                                       const at::TensorOptions& options) {
  norm1_ = register_module("norm1", QwenImageRMSNorm(in_dim, /*images=*/false, options));
  conv1_ = register_module("conv1", causal_conv(in_dim, out_dim, 3, options));
  norm2_ = register_module("norm2", QwenImageRMSNorm(out_dim, /*images=*/false, options));
  // dropout has no parameters (and is the identity at inference)
  conv2_ = register_module("conv2", causal_conv(out_dim, out_dim, 3, options));
  if (in_dim != out_dim) conv_shortcut_ = register_module("conv_shortcut", causal_conv(in_dim, out_dim, 1, options));
}

at::Tensor QwenImageResidualBlockImpl::forward(const at::Tensor& x) {
  const at::Tensor h = conv_shortcut_.is_empty() ? x : conv_shortcut_(x);
  at::Tensor y = conv1_(at::silu(norm1_(x)));
  y = conv2_(at::silu(norm2_(y)));
  return y + h;
}

void QwenImageResidualBlockImpl::set_channels_last(bool on) {
  conv1_->set_channels_last(on);
  conv2_->set_channels_last(on);
  if (!conv_shortcut_.is_empty()) conv_shortcut_->set_channels_last(on);
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageAttentionBlock
QwenImageAttentionBlockImpl::QwenImageAttentionBlockImpl(int64_t dim, const at::TensorOptions& options) {
  norm_ = register_module("norm", QwenImageRMSNorm(dim, /*images=*/true, options));
  to_qkv_ = register_module("to_qkv", nn::Conv2d(dim, 3 * dim, 1, 1, 0, true, options));
  proj_ = register_module("proj", nn::Conv2d(dim, dim, 1, 1, 0, true, options));
}

at::Tensor QwenImageAttentionBlockImpl::forward(const at::Tensor& x) {
  const int64_t batch = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  // The same reshapes as diffusers, so that SDPA gets q, k, v with the same strides (chunks of
  // one contiguous [B, 1, HW, 3C]) and takes the same kernel.
  at::Tensor qkv = to_qkv_(norm_(x)).reshape({batch, 1, 3 * channels, -1}).permute({0, 1, 3, 2}).contiguous();
  std::vector<at::Tensor> parts = qkv.chunk(3, -1);                                        // 3 x [B, 1, HW, C]
  at::Tensor out = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);        // [B, 1, HW, C]
  out = out.squeeze(1).permute({0, 2, 1}).reshape({batch, channels, height, width});
  return proj_(out) + x;  // channels-last in memory, as in diffusers
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageMidBlock (num_layers 1)
QwenImageMidBlockImpl::QwenImageMidBlockImpl(int64_t dim, const at::TensorOptions& options) {
  resnet_0_ = QwenImageResidualBlock(dim, dim, options);
  resnet_1_ = QwenImageResidualBlock(dim, dim, options);
  attention_ = QwenImageAttentionBlock(dim, options);
  register_module("resnets", torch::nn::ModuleList(resnet_0_, resnet_1_));
  register_module("attentions", torch::nn::ModuleList(attention_));
}

at::Tensor QwenImageMidBlockImpl::forward(const at::Tensor& x) { return resnet_1_(attention_(resnet_0_(x))); }

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageResample, modes upsample2d and upsample3d
QwenImageUpsampleImpl::QwenImageUpsampleImpl(int64_t dim, bool temporal, const at::TensorOptions& options) {
  auto resample = register_module("resample", std::make_shared<torch::nn::Module>());  // nn.Sequential
  // resample.0 is QwenImageUpsample (nearest-exact, no parameters)
  conv_ = resample->register_module("1", nn::Conv2d(dim, dim / 2, 3, 1, 1, true, options));
  if (temporal)
    time_conv_ = register_module("time_conv", QwenImageCausalConv3d(dim, 2 * dim, 3, 1, 1, 0, options));
}

at::Tensor QwenImageUpsampleImpl::forward(const at::Tensor& x) {
  // diffusers upsamples in float32 and casts back (QwenImageUpsample); nearest-exact only copies
  // values, which float32 holds exactly, so the input dtype gives the same bits without a float32
  // copy of the upsampled tensor (tested).
  const at::Tensor up = at::_upsample_nearest_exact2d(x, {2 * x.size(2), 2 * x.size(3)}, 2.0, 2.0);
  return conv_(up);  // [B, dim / 2, 2H, 2W]
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageUpBlock
QwenImageUpBlockImpl::QwenImageUpBlockImpl(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks,
                                           QwenImageUpsampleMode upsample, const at::TensorOptions& options) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i <= num_res_blocks; ++i) {
    resnets_.push_back(QwenImageResidualBlock(i == 0 ? in_dim : out_dim, out_dim, options));
    resnets->push_back(resnets_.back());
  }
  if (upsample != QwenImageUpsampleMode::kNone) {
    upsampler_ = QwenImageUpsample(out_dim, upsample == QwenImageUpsampleMode::kUpsample3d, options);
    register_module("upsamplers", torch::nn::ModuleList(upsampler_));
  }
}

at::Tensor QwenImageUpBlockImpl::forward(const at::Tensor& x) {
  at::Tensor h = x;
  for (auto& resnet : resnets_) h = resnet(h);
  return upsampler_.is_empty() ? h : upsampler_(h);
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageResample, modes downsample2d and downsample3d
QwenImageDownsampleImpl::QwenImageDownsampleImpl(int64_t dim, bool temporal, const at::TensorOptions& options) {
  auto resample = register_module("resample", std::make_shared<torch::nn::Module>());  // nn.Sequential
  // resample.0 is nn.ZeroPad2d((0, 1, 0, 1)) (no parameters)
  conv_ = resample->register_module("1", nn::Conv2d(dim, dim, 3, 2, 0, true, options));
  if (temporal) {
    // QwenImageCausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1)): not run on a first chunk.
    auto time_conv = register_module("time_conv", std::make_shared<torch::nn::Module>());
    time_conv->register_parameter("weight", at::empty({dim, dim, 3, 1, 1}, options), false);
    time_conv->register_parameter("bias", at::empty({dim}, options), false);
  }
}

at::Tensor QwenImageDownsampleImpl::forward(const at::Tensor& x) {
  // diffusers reshapes [B, C, 1, H, W] to [B * 1, C, H, W] (a view) and pads right and bottom.
  return conv_(at::constant_pad_nd(x, {0, 1, 0, 1}));
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageEncoder3d
QwenImageEncoderImpl::QwenImageEncoderImpl(const AutoencoderKLQwenImageConfig& config,
                                           const at::TensorOptions& options) {
  // Widths: base_dim * [1, dim_mult...]; every level's residual blocks, each followed by an attention
  // block where the level's scale (1, 1/2, 1/4, ...) is in attn_scales (empty for every released VAE),
  // then a downsampler but after the last (3D where temperal_downsample says so).
  const std::vector<int64_t>& mult = config.dim_mult;
  std::vector<int64_t> dims{config.base_dim};
  for (int64_t m : mult) dims.push_back(config.base_dim * m);
  conv_in_ = register_module("conv_in", causal_conv(3, dims[0], 3, options));
  // In diffusers the image arrives channels-last (VaeImageProcessor's transposed HWC array, unsqueezed to 5D), and
  // F.pad keeps it so up to the first downsampler, whose ZeroPad2d hands on a contiguous tensor: the convolutions
  // of the first level take channels-last inputs, the later ones contiguous (traced on the fixtures).
  conv_in_->set_channels_last(true);
  double scale = 1.0;  // diffusers' `scale`, halved per downsampler, for attn_scales
  auto down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    int64_t in_dim = dims[i];
    for (int64_t r = 0; r < config.num_res_blocks; ++r) {
      QwenImageResidualBlock block(in_dim, dims[i + 1], options);
      if (i == 0) block->set_channels_last(true);
      down_blocks->push_back(block);
      down_forward_.push_back([block](const at::Tensor& x) mutable { return block->forward(x); });
      if (std::find(config.attn_scales.begin(), config.attn_scales.end(), scale) != config.attn_scales.end()) {
        QwenImageAttentionBlock attention(dims[i + 1], options);
        down_blocks->push_back(attention);
        down_forward_.push_back([attention](const at::Tensor& x) mutable { return attention->forward(x); });
      }
      in_dim = dims[i + 1];
    }
    if (i + 1 < mult.size()) {
      scale /= 2.0;
      QwenImageDownsample down(dims[i + 1], config.temperal_downsample[i], options);
      down_blocks->push_back(down);
      down_forward_.push_back([down](const at::Tensor& x) mutable { return down->forward(x); });
    }
  }
  mid_block_ = register_module("mid_block", QwenImageMidBlock(dims.back(), options));
  norm_out_ = register_module("norm_out", QwenImageRMSNorm(dims.back(), /*images=*/false, options));
  // nonlinearity is SiLU; z_dim * 2 outputs: the mean and the log-variance
  conv_out_ = register_module("conv_out", causal_conv(dims.back(), 2 * config.z_dim, 3, options));
}

at::Tensor QwenImageEncoderImpl::forward(const at::Tensor& x) {
  at::Tensor h = conv_in_(x);
  for (const auto& f : down_forward_) h = f(h);
  h = mid_block_(h);
  return conv_out_(at::silu(norm_out_(h)));
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py QwenImageDecoder3d
QwenImageDecoderImpl::QwenImageDecoderImpl(const AutoencoderKLQwenImageConfig& config,
                                           const at::TensorOptions& options) {
  // Widths deepest first: base_dim * [dim_mult[-1], dim_mult reversed...].
  const std::vector<int64_t>& mult = config.dim_mult;
  const size_t levels = mult.size();
  std::vector<int64_t> dims{config.base_dim * mult.back()};
  for (size_t i = levels; i-- > 0;) dims.push_back(config.base_dim * mult[i]);

  conv_in_ = register_module("conv_in", causal_conv(config.z_dim, dims[0], 3, options));
  mid_block_ = register_module("mid_block", QwenImageMidBlock(dims[0], options));
  auto up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  for (size_t i = 0; i < levels; ++i) {
    // Each upsampler halves the width, so every block but the first gets dims[i] / 2.
    const int64_t in_dim = i == 0 ? dims[0] : dims[i] / 2;
    QwenImageUpsampleMode mode = QwenImageUpsampleMode::kNone;
    if (i + 1 < levels)  // temperal_upsample = temperal_downsample reversed
      mode = config.temperal_downsample[levels - 2 - i] ? QwenImageUpsampleMode::kUpsample3d
                                                        : QwenImageUpsampleMode::kUpsample2d;
    up_blocks_.push_back(QwenImageUpBlock(in_dim, dims[i + 1], config.num_res_blocks, mode, options));
    up_blocks->push_back(up_blocks_.back());
  }
  norm_out_ = register_module("norm_out", QwenImageRMSNorm(dims.back(), /*images=*/false, options));
  // nonlinearity is SiLU
  conv_out_ = register_module("conv_out", causal_conv(dims.back(), 3, 3, options));
}

at::Tensor QwenImageDecoderImpl::forward(const at::Tensor& z) {
  at::Tensor h = mid_block_(conv_in_(z));
  for (auto& block : up_blocks_) h = block(h);
  return conv_out_(at::silu(norm_out_(h)));
}

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py AutoencoderKLQwenImage (_decode)
AutoencoderKLQwenImageImpl::AutoencoderKLQwenImageImpl(const AutoencoderKLQwenImageConfig& config,
                                                       const at::TensorOptions& options)
    : config_(config) {
  // Both halves are built, the encoder's for items that start from an image (about 40% of the VAE's
  // weights, a few hundred MB of the pipeline's tens of GB).
  encoder_ = register_module("encoder", QwenImageEncoder(config, options));
  quant_conv_ = register_module("quant_conv", causal_conv(2 * config.z_dim, 2 * config.z_dim, 1, options));
  post_quant_conv_ = register_module("post_quant_conv", causal_conv(config.z_dim, config.z_dim, 1, options));
  decoder_ = register_module("decoder", QwenImageDecoder(config, options));
}

void AutoencoderKLQwenImageImpl::check_latents(const at::Tensor& z) const {
  if (z.dim() != 4 || z.size(1) != config_.z_dim)
    throw Error("vae: latents must be [batch, " + std::to_string(config_.z_dim) + ", height, width] (one frame), got " +
                c10::str(z.sizes()));
}

at::Tensor AutoencoderKLQwenImageImpl::decode(const at::Tensor& z) {
  check_latents(z);
  // diffusers' _decode: tiled when tiling is on and the latent is over a tile in either dimension;
  // else post_quant_conv, the decoder on frame 0 with an empty feature cache, clamp.
  const int64_t tile = kTileSampleMinSize / config_.scale_factor();
  if (use_tiling_ && (z.size(3) > tile || z.size(2) > tile)) return tiled_decode(z);
  return at::clamp(decoder_(post_quant_conv_(z)), -1.0, 1.0);
}

LatentDist AutoencoderKLQwenImageImpl::encode(const at::Tensor& x) {
  if (x.dim() != 4 || x.size(1) != 3)
    throw Error("vae: images must be [batch, 3, height, width], got " + c10::str(x.sizes()));
  // diffusers 0.36's encoder calls an attention block with the feature cache, which its forward does not take
  // (a TypeError): no such VAE encodes there, and none is encoded here.
  if (!config_.attn_scales.empty())
    throw InputError("vae config: attn_scales is not empty, and diffusers cannot encode with such a Qwen-Image VAE "
                     "(its encoder's attention blocks fail); use a VAE without attn_scales for items with an image");
  // DiagonalGaussianDistribution: torch.chunk(parameters, 2, dim=1), logvar clamped to [-30, 20].
  const std::vector<at::Tensor> halves = quant_conv_(encoder_(x)).chunk(2, 1);
  return {halves[0], at::clamp(halves[1], -30.0, 20.0)};
}

at::Tensor AutoencoderKLQwenImageImpl::tiled_decode(const at::Tensor& z) {
  // Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py tiled_decode (0.36.0), on one
  // frame: the frame loop runs once per tile, after clear_cache(), so each tile is decoded as
  // decode() decodes a whole frame.
  check_latents(z);
  const int64_t scale = config_.scale_factor();
  const int64_t latent_tile = kTileSampleMinSize / scale, latent_stride = kTileSampleStride / scale;
  if (latent_stride < 1)
    throw Error("vae tiling: a scale factor of " + std::to_string(scale) + " leaves tiles under one latent");
  const int64_t blend = kTileSampleMinSize - kTileSampleStride;  // in pixels, both ways
  std::vector<std::vector<at::Tensor>> tiles;
  for (int64_t i = 0; i < z.size(2); i += latent_stride) {
    std::vector<at::Tensor>& row = tiles.emplace_back();
    for (int64_t j = 0; j < z.size(3); j += latent_stride) {
      // z[:, :, i : i + tile, j : j + tile], cut at the edge
      const at::Tensor tile = z.slice(2, i, std::min(i + latent_tile, z.size(2)))
                                  .slice(3, j, std::min(j + latent_tile, z.size(3)));
      row.push_back(decoder_(post_quant_conv_(tile)));  // [B, 3, <= 256, <= 256]
    }
  }
  const at::Tensor joined = blend_and_join_tiles(tiles, blend, blend, kTileSampleStride, kTileSampleStride);
  return joined.slice(2, 0, z.size(2) * scale).slice(3, 0, z.size(3) * scale);
}

}  // namespace dpinfer::pipeline

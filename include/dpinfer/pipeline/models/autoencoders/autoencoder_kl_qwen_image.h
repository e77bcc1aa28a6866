#pragma once
// Qwen-Image's VAE (diffusers' AutoencoderKLQwenImage, fine-tuned from the Wan 2.1 video VAE),
// for one frame: decode (tiled too) and encode (img2img and inpainting, issue 29). An image is a
// single frame, and on one frame every causal 3D convolution is a 2D convolution (see
// QwenImageCausalConv3dImpl), so the encoder and the decoder run on [B, C, H, W] tensors. The parameters keep diffusers' names and 5D shapes, so
// a checkpoint loads strictly.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image_config.h"
#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline {

/// diffusers' QwenImageCausalConv3d (an nn.Conv3d with causal time padding) as it runs on the
/// first chunk of a decode: with no feature cache it pads time with 2 * pad_t zero frames in
/// front, so on one frame only the kernel's last time slice meets data and the output is a 2D
/// convolution with weight[:, :, kt - 1] (kt = 2 * pad_t + 1 for every decoder conv). weight
/// [out, in, kt, k, k] and bias [out], as the checkpoint stores them.
class QwenImageCausalConv3dImpl : public torch::nn::Module {
 public:
  /// kernel (kt, k, k) with padding (pad_t, pad_s, pad_s); stride 1.
  QwenImageCausalConv3dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_t, int64_t kernel_s,
                            int64_t pad_t, int64_t pad_s, const at::TensorOptions& options);
  /// One frame [B, in, H, W] to [B, out, H, W].
  at::Tensor forward(const at::Tensor& x) const;
  /// Convolve as diffusers does on a channels-last input (a conv3d of the zero-padded frames) instead
  /// of a contiguous conv2d: where diffusers' F.pad hands conv3d a channels_last_3d tensor (the
  /// encoder's first level, fed by an image that VaeImageProcessor made channels-last), whose kernel
  /// path sums in another order in bf16.
  void set_channels_last(bool on) { channels_last_ = on; }

  at::Tensor weight, bias;

 private:
  int64_t pad_s_;
  bool channels_last_ = false;
};
TORCH_MODULE(QwenImageCausalConv3d);

/// diffusers' QwenImageRMS_norm (no bias): F.normalize(x, dim=1) * sqrt(dim) * gamma, in x's
/// dtype (diffusers does not upcast it). gamma [dim, 1, 1] (`images`) or [dim, 1, 1, 1] (the
/// 5D-shaped gamma of the residual blocks and norm_out).
class QwenImageRMSNormImpl : public torch::nn::Module {
 public:
  QwenImageRMSNormImpl(int64_t dim, bool images, const at::TensorOptions& options);
  /// [B, dim, H, W] to [B, dim, H, W].
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor gamma;

 private:
  int64_t dim_;
  double scale_;
};
TORCH_MODULE(QwenImageRMSNorm);

/// diffusers' QwenImageResidualBlock: norm1, SiLU, conv1, norm2, SiLU, (dropout), conv2, plus
/// the input through conv_shortcut (a 1x1x1 conv) when the width changes.
class QwenImageResidualBlockImpl : public torch::nn::Module {
 public:
  QwenImageResidualBlockImpl(int64_t in_dim, int64_t out_dim, const at::TensorOptions& options);
  /// [B, in_dim, H, W] to [B, out_dim, H, W].
  at::Tensor forward(const at::Tensor& x);
  /// QwenImageCausalConv3dImpl::set_channels_last() for each of its convolutions.
  void set_channels_last(bool on);

 private:
  QwenImageRMSNorm norm1_{nullptr}, norm2_{nullptr};
  QwenImageCausalConv3d conv1_{nullptr}, conv2_{nullptr}, conv_shortcut_{nullptr};
};
TORCH_MODULE(QwenImageResidualBlock);

/// diffusers' QwenImageAttentionBlock: single-head self-attention over the H * W positions of
/// each frame, with a residual connection.
class QwenImageAttentionBlockImpl : public torch::nn::Module {
 public:
  QwenImageAttentionBlockImpl(int64_t dim, const at::TensorOptions& options);
  /// [B, dim, H, W] to [B, dim, H, W].
  at::Tensor forward(const at::Tensor& x);

 private:
  QwenImageRMSNorm norm_{nullptr};
  nn::Conv2d to_qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(QwenImageAttentionBlock);

/// diffusers' QwenImageMidBlock with one layer: resnets.0, attentions.0, resnets.1.
class QwenImageMidBlockImpl : public torch::nn::Module {
 public:
  QwenImageMidBlockImpl(int64_t dim, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);

 private:
  QwenImageResidualBlock resnet_0_{nullptr}, resnet_1_{nullptr};
  QwenImageAttentionBlock attention_{nullptr};
};
TORCH_MODULE(QwenImageMidBlock);

/// diffusers' QwenImageResample in the decoder's modes, "upsample2d" and "upsample3d": 2x
/// nearest-exact upsampling, then resample.1, a 3x3 Conv2d to dim / 2 channels. upsample3d also
/// holds time_conv (dim -> 2 * dim, kernel (3, 1, 1)), which doubles the frame count of later
/// chunks; on the first chunk diffusers only marks its cache and skips it, so it is loaded and
/// never run here.
class QwenImageUpsampleImpl : public torch::nn::Module {
 public:
  QwenImageUpsampleImpl(int64_t dim, bool temporal, const at::TensorOptions& options);
  /// [B, dim, H, W] to [B, dim / 2, 2H, 2W].
  at::Tensor forward(const at::Tensor& x);

 private:
  nn::Conv2d conv_{nullptr};
  QwenImageCausalConv3d time_conv_{nullptr};
};
TORCH_MODULE(QwenImageUpsample);

/// The upsampler an up block ends with: none (the last block), or QwenImageResample's mode.
enum class QwenImageUpsampleMode { kNone, kUpsample2d, kUpsample3d };

/// diffusers' QwenImageUpBlock: num_res_blocks + 1 residual blocks, then the upsampler, if any.
class QwenImageUpBlockImpl : public torch::nn::Module {
 public:
  QwenImageUpBlockImpl(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks, QwenImageUpsampleMode upsample,
                       const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);

 private:
  std::vector<QwenImageResidualBlock> resnets_;
  QwenImageUpsample upsampler_{nullptr};
};
TORCH_MODULE(QwenImageUpBlock);

/// diffusers' QwenImageDecoder3d on one frame: conv_in, mid_block, up_blocks, norm_out, SiLU,
/// conv_out to RGB.
class QwenImageDecoderImpl : public torch::nn::Module {
 public:
  QwenImageDecoderImpl(const AutoencoderKLQwenImageConfig& config, const at::TensorOptions& options);
  /// [B, z_dim, h, w] to [B, 3, h * scale_factor, w * scale_factor], not clamped.
  at::Tensor forward(const at::Tensor& z);

 private:
  QwenImageCausalConv3d conv_in_{nullptr}, conv_out_{nullptr};
  QwenImageMidBlock mid_block_{nullptr};
  std::vector<QwenImageUpBlock> up_blocks_;
  QwenImageRMSNorm norm_out_{nullptr};
};
TORCH_MODULE(QwenImageDecoder);

/// diffusers' QwenImageResample in the encoder's modes, "downsample2d" and "downsample3d", on the
/// first chunk of an encode: ZeroPad2d((0, 1, 0, 1)) and a 3x3 conv of stride 2 (resample.1). The
/// 3D mode's time_conv (a (3, 1, 1) conv of time stride 2) only stores the frame in the feature
/// cache on the first chunk, so on one frame it does not run; its parameters are held for the
/// checkpoint. [B, dim, H, W] to [B, dim, H / 2, W / 2].
class QwenImageDownsampleImpl : public torch::nn::Module {
 public:
  QwenImageDownsampleImpl(int64_t dim, bool temporal, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);

 private:
  nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(QwenImageDownsample);

/// diffusers' QwenImageEncoder3d on one frame: conv_in, down_blocks (one flat list of residual
/// blocks and downsamplers), mid_block, norm_out, SiLU, conv_out to 2 * z_dim channels (the mean
/// and log-variance).
class QwenImageEncoderImpl : public torch::nn::Module {
 public:
  QwenImageEncoderImpl(const AutoencoderKLQwenImageConfig& config, const at::TensorOptions& options);
  /// [B, 3, H, W] in [-1, 1] to [B, 2 * z_dim, H / scale_factor, W / scale_factor].
  at::Tensor forward(const at::Tensor& x);

 private:
  QwenImageCausalConv3d conv_in_{nullptr}, conv_out_{nullptr};
  /// down_blocks' forwards in order: residual blocks and downsamplers, one flat list as in diffusers.
  std::vector<std::function<at::Tensor(const at::Tensor&)>> down_forward_;
  QwenImageMidBlock mid_block_{nullptr};
  QwenImageRMSNorm norm_out_{nullptr};
};
TORCH_MODULE(QwenImageEncoder);

/// diffusers' AutoencoderKLQwenImage: encoder, quant_conv, post_quant_conv and decoder (state_dict
/// names), for one frame.
class AutoencoderKLQwenImageImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLQwenImageImpl(const AutoencoderKLQwenImageConfig& config,
                                      const at::TensorOptions& options = nn::default_options());

  /// One frame of latents [B, z_dim, h, w], already de-normalised by the pipeline (latents /
  /// (1 / latents_std) + latents_mean) to images [B, 3, h * scale_factor, w * scale_factor]
  /// clamped to [-1, 1], in z's dtype. diffusers' decode takes [B, z_dim, T, h, w]; the pipeline
  /// calls it as decode(latents[:, :, None]).sample[:, :, 0], which this equals.
  /// With tiling on and h or w over tile_sample_min_size / scale_factor latents, through
  /// tiled_decode(), which diffusers does not clamp.
  at::Tensor decode(const at::Tensor& z);

  /// diffusers' encode of one frame (_encode: the encoder on frame 0 with an empty feature cache,
  /// then quant_conv) as its DiagonalGaussianDistribution: images [B, 3, H, W] in [-1, 1] to the
  /// mean and the log-variance clamped to [-30, 20], each [B, z_dim, H / scale_factor, W /
  /// scale_factor] in the images' dtype (diffusers' [B, z_dim, 1, h, w] without its frame axis).
  /// Not tiled: diffusers' tiled_encode is not offered.
  LatentDist encode(const at::Tensor& x);

  /// diffusers' enable_tiling() with its default tile sizes (true) and disable_tiling() (false):
  /// decode large latents in overlapping tiles, blended; the image differs from the untiled one.
  void set_tiling(bool on) { use_tiling_ = on; }
  bool tiling() const { return use_tiling_; }

  /// diffusers' defaults, in pixels, whatever the config: tiles of 256 x 256 every 192.
  static constexpr int64_t kTileSampleMinSize = 256;
  static constexpr int64_t kTileSampleStride = 192;

  /// diffusers' tiled_decode on one frame, whatever the latent's size: tiles of 256 / scale_factor
  /// latents every 192 / scale_factor, each through post_quant_conv and the decoder with a fresh
  /// feature cache (clear_cache per tile: on one frame, the decoder as decode() runs it), blended
  /// over the 64 pixels of overlap, cut to 192 and then to the image size. Not clamped.
  /// [B, z_dim, h, w] to [B, 3, h * scale_factor, w * scale_factor].
  at::Tensor tiled_decode(const at::Tensor& z);

  const AutoencoderKLQwenImageConfig& config() const { return config_; }

 private:
  void check_latents(const at::Tensor& z) const;

  AutoencoderKLQwenImageConfig config_;
  bool use_tiling_ = false;
  QwenImageEncoder encoder_{nullptr};
  QwenImageCausalConv3d quant_conv_{nullptr}, post_quant_conv_{nullptr};
  QwenImageDecoder decoder_{nullptr};
};
TORCH_MODULE(AutoencoderKLQwenImage);

}  // namespace dpinfer::pipeline

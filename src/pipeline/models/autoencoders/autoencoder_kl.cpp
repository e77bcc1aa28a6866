#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"

#include <algorithm>

#include "dpinfer/pipeline/models/autoencoders/vae_tiling.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

// The VAE's resnets and norms use eps 1e-6 whatever the config says.
constexpr double kEps = 1e-6;

// diffusers' tile_overlap_factor: neighbouring tiles share a quarter of a tile.
constexpr double kTileOverlapFactor = 0.25;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, const at::TensorOptions& options) {
  return nn::Conv2d(in, out, kernel, 1, (kernel - 1) / 2, true, options);
}

UNetMidBlock2DOptions mid_options(const AutoencoderKLConfig& config) {
  UNetMidBlock2DOptions o;
  o.in_channels = config.block_out_channels.back();
  o.groups = config.norm_num_groups;
  o.eps = kEps;
  o.add_attention = config.mid_block_add_attention;
  o.attention_head_dim = config.block_out_channels.back();
  return o;
}

}  // namespace

// Ref: diffusers/models/autoencoders/vae.py Encoder
VAEEncoderImpl::VAEEncoderImpl(const AutoencoderKLConfig& config, const at::TensorOptions& options) {
  const std::vector<int64_t>& channels = config.block_out_channels;
  conv_in_ = register_module("conv_in", conv(config.in_channels, channels[0], 3, options));
  auto down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (size_t i = 0; i < channels.size(); ++i) {
    down_blocks_.push_back(DownEncoderBlock2D(config.layers_per_block, i == 0 ? channels[0] : channels[i - 1],
                                              channels[i], config.norm_num_groups, kEps, i + 1 < channels.size(), options,
                                              config.contiguous_shortcut_input));
    down_blocks->push_back(down_blocks_.back());
  }
  mid_block_ = register_module("mid_block", UNetMidBlock2D(mid_options(config), options));
  conv_norm_out_ = register_module(
      "conv_norm_out", nn::GroupNorm(config.norm_num_groups, channels.back(), kEps, options));
  // conv_act is SiLU
  conv_out_ = register_module("conv_out", conv(channels.back(), 2 * config.latent_channels, 3, options));
}

at::Tensor VAEEncoderImpl::forward(const at::Tensor& x) {
  at::Tensor h = conv_in_(x);
  for (auto& block : down_blocks_) h = block(h);
  h = mid_block_(h);
  return conv_out_(at::silu(conv_norm_out_(h)));
}

// Ref: diffusers/models/autoencoders/vae.py Decoder (norm_type "group")
VAEDecoderImpl::VAEDecoderImpl(const AutoencoderKLConfig& config, const at::TensorOptions& options) {
  const std::vector<int64_t>& channels = config.block_out_channels;
  const size_t n = channels.size();
  conv_in_ = register_module("conv_in", conv(config.latent_channels, channels.back(), 3, options));
  mid_block_ = register_module("mid_block", UNetMidBlock2D(mid_options(config), options));
  auto up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  int64_t out = channels.back();
  for (size_t i = 0; i < n; ++i) {
    const int64_t prev = out;
    out = channels[n - 1 - i];
    up_blocks_.push_back(
        UpDecoderBlock2D(config.layers_per_block + 1, prev, out, config.norm_num_groups, kEps, i + 1 < n, options,
                         config.contiguous_shortcut_input));
    up_blocks->push_back(up_blocks_.back());
  }
  conv_norm_out_ = register_module(
      "conv_norm_out", nn::GroupNorm(config.norm_num_groups, channels[0], kEps, options));
  // conv_act is SiLU
  conv_out_ = register_module("conv_out", conv(channels[0], config.out_channels, 3, options));
}

at::Tensor VAEDecoderImpl::forward(const at::Tensor& z) {
  at::Tensor h = mid_block_(conv_in_(z));
  for (auto& block : up_blocks_) h = block(h);
  return conv_out_(at::silu(conv_norm_out_(h)));
}

// Ref: diffusers/models/autoencoders/autoencoder_kl.py AutoencoderKL
AutoencoderKLImpl::AutoencoderKLImpl(const AutoencoderKLConfig& config, const at::TensorOptions& options)
    : config_(config) {
  encoder_ = register_module("encoder", VAEEncoder(config, options));
  decoder_ = register_module("decoder", VAEDecoder(config, options));
  if (config.use_quant_conv)
    quant_conv_ = register_module("quant_conv", conv(2 * config.latent_channels, 2 * config.latent_channels, 1, options));
  if (config.use_post_quant_conv)
    post_quant_conv_ = register_module("post_quant_conv", conv(config.latent_channels, config.latent_channels, 1, options));
}

at::Tensor AutoencoderKLImpl::decode(const at::Tensor& z) {
  if (z.dim() != 4 || z.size(1) != config_.latent_channels)
    throw Error("vae: latents must be [batch, " + std::to_string(config_.latent_channels) + ", height, width], got " +
                c10::str(z.sizes()));
  // Ref: diffusers/models/autoencoders/autoencoder_kl.py _decode (0.36.0). use_slicing, which
  // would decode the batch one image at a time, is off in every pipeline: the batch goes whole,
  // into each tile too.
  const int64_t tile = tile_latent_min_size();
  if (use_tiling_ && (z.size(3) > tile || z.size(2) > tile)) return tiled_decode(z);
  return decoder_(post_quant_conv_.is_empty() ? z : post_quant_conv_(z));
}

LatentDist AutoencoderKLImpl::encode(const at::Tensor& x) {
  if (x.dim() != 4 || x.size(1) != config_.in_channels)
    throw Error("vae: images must be [batch, " + std::to_string(config_.in_channels) + ", height, width], got " +
                c10::str(x.sizes()));
  // Ref: diffusers/models/autoencoders/autoencoder_kl.py _encode (0.36.0)
  at::Tensor moments;
  if (use_tiling_ && (x.size(3) > tile_sample_min_size() || x.size(2) > tile_sample_min_size())) {
    moments = tiled_encode(x);
  } else {
    moments = encoder_(x);
    if (!quant_conv_.is_empty()) moments = quant_conv_(moments);
  }
  // DiagonalGaussianDistribution: mean and log-variance, the latter clamped.
  std::vector<at::Tensor> parts = moments.chunk(2, 1);
  return {parts[0], at::clamp(parts[1], -30.0, 20.0)};
}

void AutoencoderKLImpl::set_tiling(bool on) {
  // diffusers takes tile_sample_min_size from the config as it is: a list sample_size makes
  // _encode's size test and tiled_decode fail (int > list, list * float). Refused up front.
  if (on && config_.sample_size_is_list)
    throw InputError("vae config: sample_size is a list, on which diffusers' VAE tiling fails; run without "
                     "--vae-tiling");
  use_tiling_ = on;
}

int64_t AutoencoderKLImpl::tile_latent_min_size() const {
  // int(sample_size / (2 ** (len(block_out_channels) - 1))): a true division, truncated.
  return static_cast<int64_t>(static_cast<double>(config_.sample_size) / static_cast<double>(config_.scale_factor()));
}

namespace {

/// The start of each tile along a dimension of `size`: range(0, size, stride).
std::vector<int64_t> tile_starts(int64_t size, int64_t stride) {
  if (stride < 1) throw Error("vae tiling: the tile stride is " + std::to_string(stride) + "; the tile is too small");
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < size; i += stride) starts.push_back(i);
  return starts;
}

/// x[:, :, i : i + size, j : j + size] (a view; the slice stops at the edge, as Python's does).
at::Tensor tile_at(const at::Tensor& x, int64_t i, int64_t j, int64_t size) {
  return x.slice(2, i, std::min(i + size, x.size(2))).slice(3, j, std::min(j + size, x.size(3)));
}

}  // namespace

at::Tensor AutoencoderKLImpl::tiled_decode(const at::Tensor& z) {
  // Ref: diffusers/models/autoencoders/autoencoder_kl.py tiled_decode (0.36.0)
  const int64_t latent_tile = tile_latent_min_size(), sample_tile = tile_sample_min_size();
  const auto stride = static_cast<int64_t>(static_cast<double>(latent_tile) * (1.0 - kTileOverlapFactor));
  const auto blend = static_cast<int64_t>(static_cast<double>(sample_tile) * kTileOverlapFactor);
  const int64_t keep = sample_tile - blend;  // diffusers' row_limit
  std::vector<std::vector<at::Tensor>> tiles;
  for (int64_t i : tile_starts(z.size(2), stride)) {
    std::vector<at::Tensor>& row = tiles.emplace_back();
    for (int64_t j : tile_starts(z.size(3), stride)) {
      const at::Tensor tile = tile_at(z, i, j, latent_tile);  // [B, latent_channels, <= tile, <= tile]
      row.push_back(decoder_(post_quant_conv_.is_empty() ? tile : post_quant_conv_(tile)));
    }
  }
  return blend_and_join_tiles(tiles, blend, blend, keep, keep);
}

at::Tensor AutoencoderKLImpl::tiled_encode(const at::Tensor& x) {
  // Ref: diffusers/models/autoencoders/autoencoder_kl.py _tiled_encode (0.36.0)
  const int64_t latent_tile = tile_latent_min_size(), sample_tile = tile_sample_min_size();
  const auto stride = static_cast<int64_t>(static_cast<double>(sample_tile) * (1.0 - kTileOverlapFactor));
  const auto blend = static_cast<int64_t>(static_cast<double>(latent_tile) * kTileOverlapFactor);
  const int64_t keep = latent_tile - blend;
  std::vector<std::vector<at::Tensor>> tiles;
  for (int64_t i : tile_starts(x.size(2), stride)) {
    std::vector<at::Tensor>& row = tiles.emplace_back();
    for (int64_t j : tile_starts(x.size(3), stride)) {
      at::Tensor moments = encoder_(tile_at(x, i, j, sample_tile));  // [B, 2 * latent_channels, h, w]
      row.push_back(quant_conv_.is_empty() ? moments : quant_conv_(moments));
    }
  }
  return blend_and_join_tiles(tiles, blend, blend, keep, keep);
}

}  // namespace dpinfer::pipeline

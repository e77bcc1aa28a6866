#pragma once
// diffusers' AutoencoderKLQwenImage config (vae/config.json of Qwen-Image), resolved; values
// dpinfer does not implement, and sizes beyond any real model, are refused with a dpinfer::Error
// naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' AutoencoderKLQwenImage config. The defaults are diffusers' (Qwen-Image's own VAE).
struct AutoencoderKLQwenImageConfig {
  int64_t base_dim = 96;
  /// Latent channels (the encoder makes 2 * z_dim: mean and log-variance).
  int64_t z_dim = 16;
  /// Channel multipliers per level: the decoder's widths are base_dim * dim_mult, deepest first.
  std::vector<int64_t> dim_mult{1, 2, 4, 4};
  /// Residual blocks per encoder level; each decoder up block has num_res_blocks + 1.
  int64_t num_res_blocks = 2;
  /// The encoder's attention levels (an attention block after each residual block of a listed
  /// scale). diffusers' decoder ignores it (its only attention is the mid block's), and diffusers'
  /// encoder fails on any, so dpinfer builds them for the checkpoint but refuses to encode.
  std::vector<double> attn_scales;
  /// Per level transition, encoder order: whether it also halves time. The decoder reads it
  /// reversed (upsample3d where true, upsample2d where false); one entry per dim_mult entry but
  /// the last.
  std::vector<bool> temperal_downsample{false, true, true};
  /// Recorded only: dropout is the identity at inference.
  double dropout = 0.0;
  /// Per-channel latent statistics (z_dim entries each). The pipeline de-normalises before
  /// decode: latents / (1 / latents_std) + latents_mean (pipeline_qwenimage.py).
  std::vector<double> latents_mean{-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                                   0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921};
  std::vector<double> latents_std{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                  3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};

  /// The image size over the latent size, 2^len(temperal_downsample), as the pipeline's
  /// vae_scale_factor (8 for Qwen-Image).
  int64_t scale_factor() const { return int64_t{1} << temperal_downsample.size(); }

  /// Parses a VAE config. Throws dpinfer::Error naming the field at fault.
  static AutoencoderKLQwenImageConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static AutoencoderKLQwenImageConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

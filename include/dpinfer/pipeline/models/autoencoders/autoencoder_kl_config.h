#pragma once
// diffusers' AutoencoderKL config (vae/config.json), resolved.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' AutoencoderKL config (vae/config.json).
struct AutoencoderKLConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  /// Every down block is a DownEncoderBlock2D and every up block an UpDecoderBlock2D.
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;
  int64_t latent_channels = 4;
  int64_t norm_num_groups = 32;
  /// The first entry when the config gives a list (diffusers' tiling then fails: set_tiling()).
  int64_t sample_size = 32;
  bool sample_size_is_list = false;
  double scaling_factor = 0.18215;
  std::optional<double> shift_factor;
  std::optional<std::vector<double>> latents_mean;
  std::optional<std::vector<double>> latents_std;
  /// Recorded for the pipeline: whether diffusers would run this VAE in float32 under fp16.
  bool force_upcast = true;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  /// Not a config key: whether the blocks' ResnetBlock2D shortcut makes its input contiguous, as diffusers <= 0.36
  /// does (nn::ResnetBlock2DOptions). AutoencoderKLFlux2, which exists from 0.37 on, clears it.
  bool contiguous_shortcut_input = true;

  /// 2^(number of blocks - 1): the image size over the latent size.
  int64_t scale_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }

  /// Parses a VAE config. Throws dpinfer::Error naming the field at fault.
  static AutoencoderKLConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static AutoencoderKLConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

#pragma once
// The config.json of each model component, parsed and resolved: per-block
// values are expanded to one entry per block, defaults are the reference
// library's, and any setting that would change the graph in a way dpinfer does
// not implement is refused with a dpinfer::Error that names the field.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// transformers' CLIPTextConfig (text_encoder/config.json).
struct CLIPTextConfig {
  /// The MLP activation: quick_gelu is x * sigmoid(1.702 x) (SD 1.x), gelu the exact erf GELU (SD 2.x).
  enum class Activation { kQuickGELU, kGELU };

  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  Activation hidden_act = Activation::kQuickGELU;
  double layer_norm_eps = 1e-5;
  /// Decides how pooler_output finds the end-of-text token: 2 (legacy configs) means argmax(ids).
  int64_t eos_token_id = 49407;

  /// Parses a text encoder config. Throws dpinfer::Error naming the field at fault.
  static CLIPTextConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static CLIPTextConfig from_file(const std::string& path);
};

/// diffusers' UNet2DConditionModel config (unet/config.json), resolved per block.
struct UNetConfig {
  enum class DownBlockType { kCrossAttnDownBlock2D, kDownBlock2D };
  enum class UpBlockType { kCrossAttnUpBlock2D, kUpBlock2D };
  enum class MidBlockType { kNone, kUNetMidBlock2DCrossAttn, kUNetMidBlock2D };

  /// Latent size (height, width) that gives the pipeline's default image size; unset when the config has none.
  std::optional<std::array<int64_t, 2>> sample_size;
  int64_t in_channels = 4;
  int64_t out_channels = 4;
  bool center_input_sample = false;
  bool flip_sin_to_cos = true;
  double freq_shift = 0;
  std::vector<DownBlockType> down_block_types;
  MidBlockType mid_block_type = MidBlockType::kUNetMidBlock2DCrossAttn;
  std::vector<UpBlockType> up_block_types;
  /// One entry per down block; every other per-block list below is too (up blocks use them reversed).
  std::vector<int64_t> block_out_channels;
  std::vector<int64_t> layers_per_block;
  std::vector<int64_t> transformer_layers_per_block;
  /// The number of attention heads per block: num_attention_heads when given, else
  /// attention_head_dim, which diffusers reads as a head count (diffusers issue #2011).
  std::vector<int64_t> num_attention_heads;
  std::vector<int64_t> cross_attention_dim;
  std::vector<bool> only_cross_attention;
  int64_t downsample_padding = 1;
  double mid_block_scale_factor = 1;
  double resnet_out_scale_factor = 1;
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;
  bool use_linear_projection = false;
  /// Recorded only: under scaled_dot_product_attention diffusers' AttnProcessor2_0 ignores it too.
  bool upcast_attention = false;
  /// The width of the time embedding MLP: time_embedding_dim, else 4 * block_out_channels[0].
  int64_t time_embed_dim = 1280;
  /// Set for LCM-style UNets: the width of the timestep_cond input added before time_embedding.linear_1.
  std::optional<int64_t> time_cond_proj_dim;
  int64_t conv_in_kernel = 3;
  int64_t conv_out_kernel = 3;

  /// The number of up blocks that upsample: all but the last.
  int64_t num_upsamplers() const { return static_cast<int64_t>(up_block_types.size()) - 1; }

  /// Parses a UNet config. Throws dpinfer::Error naming the field at fault.
  static UNetConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static UNetConfig from_file(const std::string& path);
};

/// diffusers' AutoencoderKL config (vae/config.json).
struct AutoencoderKLConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  /// Every down block is a DownEncoderBlock2D and every up block an UpDecoderBlock2D.
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;
  int64_t latent_channels = 4;
  int64_t norm_num_groups = 32;
  int64_t sample_size = 32;
  double scaling_factor = 0.18215;
  std::optional<double> shift_factor;
  std::optional<std::vector<double>> latents_mean;
  std::optional<std::vector<double>> latents_std;
  /// Recorded for the pipeline: whether diffusers would run this VAE in float32 under fp16.
  bool force_upcast = true;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;

  /// 2^(number of blocks - 1): the image size over the latent size.
  int64_t scale_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }

  /// Parses a VAE config. Throws dpinfer::Error naming the field at fault.
  static AutoencoderKLConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static AutoencoderKLConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

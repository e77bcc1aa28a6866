#pragma once
// diffusers' UNet2DConditionModel config (unet/config.json), resolved per block; settings dpinfer
// does not implement are refused with a dpinfer::Error naming the field.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' UNet2DConditionModel config (unet/config.json), resolved per block.
struct UNetConfig {
  enum class DownBlockType { kCrossAttnDownBlock2D, kDownBlock2D };
  enum class UpBlockType { kCrossAttnUpBlock2D, kUpBlock2D };
  enum class MidBlockType { kNone, kUNetMidBlock2DCrossAttn, kUNetMidBlock2D };
  /// addition_embed_type: none (SD 1.x/2.x), or SDXL's "text_time".
  enum class AdditionEmbedType { kNone, kTextTime };

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
  /// SDXL: time_embedding += add_embedding(cat(text_embeds, sinusoids of the 6 time ids)).
  AdditionEmbedType addition_embed_type = AdditionEmbedType::kNone;
  /// text_time only: the sinusoid width of each time id.
  int64_t addition_time_embed_dim = 0;
  /// text_time only: add_embedding's input width, pooled text width + 6 * addition_time_embed_dim.
  int64_t projection_class_embeddings_input_dim = 0;
  int64_t conv_in_kernel = 3;
  int64_t conv_out_kernel = 3;

  /// text_time only: the pooled text embedding width the UNet expects.
  int64_t text_embeds_dim() const { return projection_class_embeddings_input_dim - 6 * addition_time_embed_dim; }
  /// The number of up blocks that upsample: all but the last.
  int64_t num_upsamplers() const { return static_cast<int64_t>(up_block_types.size()) - 1; }

  /// Parses a UNet config. Throws dpinfer::Error naming the field at fault.
  static UNetConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static UNetConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

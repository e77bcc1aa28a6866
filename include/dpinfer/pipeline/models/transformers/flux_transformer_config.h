#pragma once
// diffusers' FluxTransformer2DModel config (transformer/config.json); values dpinfer does not
// implement, and sizes beyond any real model, are refused with a dpinfer::Error naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' FluxTransformer2DModel config (models/transformers/transformer_flux.py, 0.36.0). The
/// defaults are diffusers' signature defaults, FLUX.1's shapes (FLUX.1-dev's config.json also sets
/// guidance_embeds true).
struct FluxTransformerConfig {
  /// Only sizes proj_out (patch_size^2 * out_channels); FluxPipeline packs 2x2 itself.
  int64_t patch_size = 1;
  /// The features of a packed token: 16 latent channels * 2 * 2.
  int64_t in_channels = 64;
  /// null (or absent) in config.json means in_channels.
  int64_t out_channels = 64;
  /// Double-stream blocks (transformer_blocks).
  int64_t num_layers = 19;
  /// Single-stream blocks (single_transformer_blocks).
  int64_t num_single_layers = 38;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  /// The T5 encoder's hidden size (T5-XXL: 4096).
  int64_t joint_attention_dim = 4096;
  /// The pooled CLIP output's width (CLIP-L: 768).
  int64_t pooled_projection_dim = 768;
  /// True: time_text_embed is CombinedTimestepGuidanceTextProjEmbeddings and the forward takes a
  /// guidance value (FLUX.1-dev); false: CombinedTimestepTextProjEmbeddings, no guidance (schnell).
  bool guidance_embeds = false;
  /// RoPE widths per id axis (FluxPosEmbed: axis 0 is 0 for every token in text-to-image, then row
  /// and column); they sum to attention_head_dim.
  std::vector<int64_t> axes_dims_rope{16, 56, 56};

  /// num_attention_heads * attention_head_dim, the width of the blocks.
  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  /// The output features per token, patch_size^2 * out_channels.
  int64_t out_features() const { return patch_size * patch_size * out_channels; }

  /// Parses a transformer config. Throws dpinfer::Error naming the field at fault.
  static FluxTransformerConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static FluxTransformerConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

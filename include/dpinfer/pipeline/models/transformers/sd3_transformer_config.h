#pragma once
// diffusers' SD3Transformer2DModel config (transformer/config.json) for SD3 and SD3.5; values
// dpinfer does not implement, and sizes beyond any real model, are refused with a dpinfer::Error
// naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' SD3Transformer2DModel config (models/transformers/transformer_sd3.py, 0.36.0). The
/// defaults are diffusers' signature defaults.
struct SD3TransformerConfig {
  /// The latent size the model was trained at; only the position table's base grid depends on it,
  /// and dpinfer reads that table from the checkpoint (pos_embed.pos_embed).
  int64_t sample_size = 128;
  int64_t patch_size = 2;
  int64_t in_channels = 16;
  int64_t num_layers = 18;
  int64_t attention_head_dim = 64;
  int64_t num_attention_heads = 18;
  /// The width of the prompt embeddings (T5-XXL's 4096; CLIP-L + CLIP-G's 2048 are zero-padded to it).
  int64_t joint_attention_dim = 4096;
  /// context_embedder's output width; the blocks need it to be inner_dim().
  int64_t caption_projection_dim = 1152;
  /// The pooled prompt width (CLIP-L's 768 + CLIP-G's 1280 projections).
  int64_t pooled_projection_dim = 2048;
  /// Null in config.json means in_channels.
  int64_t out_channels = 16;
  /// The side of the square sin-cos position table that PatchEmbed crops from; a latent may be at
  /// most pos_embed_max_size patches high and wide.
  int64_t pos_embed_max_size = 96;
  /// Blocks with SD3.5's second, image-only attention (attn2, norm1 an SD35AdaLayerNormZeroX).
  std::vector<int64_t> dual_attention_layers;
  /// SD3.5's per-head RMSNorm on q and k ("rms_norm"), or none (SD3).
  bool qk_norm = false;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  bool is_dual_attention_layer(int64_t index) const;

  /// Parses a transformer config. Throws dpinfer::Error naming the field at fault.
  static SD3TransformerConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static SD3TransformerConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

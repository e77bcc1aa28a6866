#pragma once
// diffusers' Flux2Transformer2DModel config (transformer/config.json); values dpinfer does not
// implement, and sizes beyond any real model, are refused with a dpinfer::Error naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' Flux2Transformer2DModel config (models/transformers/transformer_flux2.py, 0.37.0). The
/// defaults are diffusers' signature defaults (FLUX.2 [dev]'s shapes; [klein] 4B's config.json has 5 + 20
/// blocks, 24 heads, joint_attention_dim 7680 and guidance_embeds false).
struct Flux2TransformerConfig {
  /// Only sizes proj_out (patch_size^2 * out_channels); the pipeline patchifies 2x2 itself.
  int64_t patch_size = 1;
  /// The features of a token: 32 latent channels * 2 * 2.
  int64_t in_channels = 128;
  /// null (or absent) in config.json means in_channels.
  int64_t out_channels = 128;
  /// Double-stream blocks (transformer_blocks).
  int64_t num_layers = 8;
  /// Single-stream blocks (single_transformer_blocks).
  int64_t num_single_layers = 48;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 48;
  /// The width of the text states: 3 stacked hidden states of the text encoder ([klein] 4B: 3 * 2560).
  int64_t joint_attention_dim = 15360;
  /// The sinusoidal width of the timestep (and guidance) features.
  int64_t timestep_guidance_channels = 256;
  /// The feed-forward's hidden width over dim: int(dim * mlp_ratio).
  double mlp_ratio = 3.0;
  /// RoPE widths per id axis (T, H, W, L); they sum to attention_head_dim.
  std::vector<int64_t> axes_dims_rope{32, 32, 32, 32};
  double rope_theta = 2000;
  /// Every norm of the model: the blocks' LayerNorms, the QK RMSNorms, norm_out.
  double eps = 1e-6;
  /// time_guidance_embed has a guidance_embedder ([dev]); [klein] has none.
  bool guidance_embeds = true;

  /// num_attention_heads * attention_head_dim, the width of the blocks.
  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  /// int(inner_dim * mlp_ratio), the feed-forwards' hidden width.
  int64_t mlp_hidden_dim() const { return static_cast<int64_t>(static_cast<double>(inner_dim()) * mlp_ratio); }
  /// The output features per token, patch_size^2 * out_channels.
  int64_t out_features() const { return patch_size * patch_size * out_channels; }

  /// Parses a transformer config. Throws dpinfer::Error naming the field at fault.
  static Flux2TransformerConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static Flux2TransformerConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

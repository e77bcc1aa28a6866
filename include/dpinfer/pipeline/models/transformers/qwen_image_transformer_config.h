#pragma once
// diffusers' QwenImageTransformer2DModel config (transformer/config.json); values dpinfer does
// not implement, and sizes beyond any real model, are refused with a dpinfer::Error naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' QwenImageTransformer2DModel config. The defaults are diffusers' (Qwen-Image's
/// shapes, but in_channels 64: the real config.json says so too).
struct QwenImageTransformerConfig {
  int64_t patch_size = 2;
  /// The features of a packed token: latent channels * patch_size^2 (Qwen-Image: 16 * 4).
  int64_t in_channels = 64;
  /// The latent channels of the output; null in config.json means in_channels.
  int64_t out_channels = 16;
  int64_t num_layers = 60;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  /// The text encoder's hidden size (Qwen2.5-VL 7B: 3584).
  int64_t joint_attention_dim = 3584;
  /// Recorded only: diffusers 0.36.0 builds no guidance embedder for it, and its forward fails
  /// when given guidance, so a model with guidance_embeds true runs as one without.
  bool guidance_embeds = false;
  /// MSRoPE widths per position axis (frame, height, width); they sum to attention_head_dim.
  std::vector<int64_t> axes_dims_rope{16, 56, 56};

  /// num_attention_heads * attention_head_dim, the width of the blocks.
  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  /// The output features per token, patch_size^2 * out_channels.
  int64_t out_features() const { return patch_size * patch_size * out_channels; }

  /// Parses a transformer config. Throws dpinfer::Error naming the field at fault.
  static QwenImageTransformerConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static QwenImageTransformerConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

#pragma once
// diffusers' ChromaTransformer2DModel config (transformer/config.json); values dpinfer does not
// implement, and sizes beyond any real model, are refused with a dpinfer::Error naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' ChromaTransformer2DModel config (models/transformers/transformer_chroma.py, 0.36.0). The
/// defaults are diffusers' signature defaults (Chroma1-HD's shapes: FLUX.1-schnell's blocks).
struct ChromaTransformerConfig {
  /// Only sizes proj_out (patch_size^2 * out_channels); ChromaPipeline packs 2x2 itself.
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
  /// RoPE widths per id axis (FluxPosEmbed); they sum to attention_head_dim.
  std::vector<int64_t> axes_dims_rope{16, 56, 56};
  /// The approximator's input width, a multiple of 4: sinusoids of the timestep and of a zero guidance
  /// (approximator_num_channels / 4 each) and of the modulation index (approximator_num_channels / 2).
  int64_t approximator_num_channels = 64;
  int64_t approximator_hidden_dim = 5120;
  int64_t approximator_layers = 5;

  /// num_attention_heads * attention_head_dim, the width of the blocks.
  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  /// The output features per token, patch_size^2 * out_channels.
  int64_t out_features() const { return patch_size * patch_size * out_channels; }
  /// The modulation vectors the approximator makes (its mod_index_length): 3 per single block, 6 per
  /// stream per double block, 2 for norm_out.
  int64_t mod_index_length() const { return 3 * num_single_layers + 2 * 6 * num_layers + 2; }

  /// Parses a transformer config. Throws dpinfer::Error naming the field at fault.
  static ChromaTransformerConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static ChromaTransformerConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

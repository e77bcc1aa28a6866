#pragma once
// diffusers' ZImageTransformer2DModel config (transformer/config.json); values dpinfer does
// not implement, and sizes beyond any real model, are refused with a dpinfer::Error naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' ZImageTransformer2DModel config. The defaults are diffusers' (Z-Image-Turbo's shapes).
struct ZImageTransformerConfig {
  /// The patch sizes the model has an x embedder and a final layer for, pairwise: the module
  /// keys "<patch>-<f_patch>" of all_x_embedder and all_final_layer.
  std::vector<int64_t> all_patch_size{2};
  std::vector<int64_t> all_f_patch_size{1};
  int64_t in_channels = 16;  ///< also the output channels
  int64_t dim = 3840;
  int64_t n_layers = 30;
  /// The depth of noise_refiner (modulated) and of context_refiner (not modulated).
  int64_t n_refiner_layers = 2;
  int64_t n_heads = 30;
  /// Recorded only: diffusers 0.36 builds every attention with n_heads key/value heads.
  int64_t n_kv_heads = 30;
  double norm_eps = 1e-5;
  bool qk_norm = true;
  int64_t cap_feat_dim = 2560;
  double rope_theta = 256.0;
  double t_scale = 1000.0;
  /// RoPE widths per position axis (caption/frame, height, width); they sum to the head dim.
  std::vector<int64_t> axes_dims{32, 48, 48};
  /// Positions per axis: every position id must be below its axis' length.
  std::vector<int64_t> axes_lens{1024, 512, 512};

  int64_t head_dim() const { return dim / n_heads; }
  /// The conditioning width of the AdaLN modulations and the timestep embedder, min(dim, 256).
  int64_t adaln_embed_dim() const { return dim < 256 ? dim : 256; }
  /// The SwiGLU hidden width, int(dim / 3 * 8) as diffusers computes it.
  int64_t ffn_hidden_dim() const { return static_cast<int64_t>(static_cast<double>(dim) / 3.0 * 8.0); }

  /// Parses a transformer config. Throws dpinfer::Error naming the field at fault.
  static ZImageTransformerConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static ZImageTransformerConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

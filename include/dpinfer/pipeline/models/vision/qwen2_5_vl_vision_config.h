#pragma once
// transformers' Qwen2_5_VLVisionConfig: the vision_config object of a Qwen2.5-VL config.json (Qwen-Image-Edit's
// text_encoder/config.json), as Qwen2_5_VisionTransformerPretrainedModel reads it. Values dpinfer does not
// implement, and sizes beyond any real model, are refused with a dpinfer::Error naming the field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// Qwen2_5_VLVisionConfig. The defaults are transformers 4.57's (Qwen2.5-VL 7B's tower, but out_hidden_size 3584:
/// the real config.json gives it too).
struct Qwen2_5_VLVisionConfig {
  int64_t depth = 32;
  int64_t hidden_size = 3584;
  /// The blocks' MLP activation: "silu" (every Qwen2.5-VL checkpoint), "gelu" (erf) or "gelu_pytorch_tanh".
  std::string hidden_act = "silu";
  int64_t intermediate_size = 3420;
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  /// In input pixels; the attention windows are window_size / spatial_merge_size / patch_size merged tokens square.
  int64_t window_size = 112;
  int64_t out_hidden_size = 3584;
  /// The blocks that attend over a whole frame; the others attend within windows. transformers tests
  /// membership (`layer_num in fullatt_block_indexes`), so an index past depth selects nothing.
  std::vector<int64_t> fullatt_block_indexes{7, 15, 23, 31};

  int64_t head_dim() const { return hidden_size / num_heads; }
  /// spatial_merge_size^2: the patches one output token merges.
  int64_t spatial_merge_unit() const { return spatial_merge_size * spatial_merge_size; }
  /// The side of an attention window in merged tokens (transformers' vit_merger_window_size).
  int64_t merged_window() const { return window_size / spatial_merge_size / patch_size; }
  /// in_channels * temporal_patch_size * patch_size^2, the features of one row of pixel_values.
  int64_t patch_features() const { return in_channels * temporal_patch_size * patch_size * patch_size; }

  /// Parses `vision_config`. Throws dpinfer::Error naming the field at fault.
  static Qwen2_5_VLVisionConfig from_json(const nlohmann::json& vision_config);
};

}  // namespace dpinfer::pipeline

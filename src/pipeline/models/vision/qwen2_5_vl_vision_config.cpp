#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {

// Ref: transformers/models/qwen2_5_vl/configuration_qwen2_5_vl.py Qwen2_5_VLVisionConfig.__init__ (4.57.6);
// modeling_qwen2_5_vl.py Qwen2_5_VisionTransformerPretrainedModel for what the values must satisfy.
Qwen2_5_VLVisionConfig Qwen2_5_VLVisionConfig::from_json(const nlohmann::json& j) {
  using io::ConfigReader;
  using namespace transformer_config;  // the bounds; here, not at file scope: a unity batch would see it
  ConfigReader r(j, "text_encoder config vision_config");
  Qwen2_5_VLVisionConfig c;
  c.depth = bounded_integer_field(r, "depth", c.depth, 0, kMaxLayers);
  c.hidden_size = bounded_integer_field(r, "hidden_size", c.hidden_size, 1, kMaxWidth);
  c.intermediate_size = bounded_integer_field(r, "intermediate_size", c.intermediate_size, 1, 4 * kMaxWidth);
  c.num_heads = bounded_integer_field(r, "num_heads", c.num_heads, 1, kMaxWidth);
  c.in_channels = bounded_integer_field(r, "in_channels", c.in_channels, 1, 16);
  c.patch_size = bounded_integer_field(r, "patch_size", c.patch_size, 1, kMaxPatch);
  c.spatial_merge_size = bounded_integer_field(r, "spatial_merge_size", c.spatial_merge_size, 1, 16);
  c.temporal_patch_size = bounded_integer_field(r, "temporal_patch_size", c.temporal_patch_size, 1, 16);
  c.window_size = bounded_integer_field(r, "window_size", c.window_size, 1, kMaxWidth);
  c.out_hidden_size = bounded_integer_field(r, "out_hidden_size", c.out_hidden_size, 1, kMaxWidth);
  c.hidden_act = r.string("hidden_act", c.hidden_act);
  if (c.hidden_act != "silu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    throw r.unsupported("hidden_act", c.hidden_act, "silu, gelu, gelu_pytorch_tanh");
  check_divisible(r, "hidden_size", c.hidden_size, "num_heads", c.num_heads);
  // Qwen2_5_VisionRotaryEmbedding(head_dim // 2) gives head_dim // 4 frequencies per axis (rounded up), and
  // cat((h, w) twice) must be head_dim wide for apply_rotary_pos_emb_vision to broadcast.
  if (c.head_dim() % 4 != 0)
    throw r.error("hidden_size", "/ num_heads = " + std::to_string(c.head_dim()) +
                                     " must be a multiple of 4 (two rotary axes of rotated pairs)");
  // get_window_index divides by the merged window and the merger views spatial_merge_unit patches as one row.
  if (c.merged_window() < 1)
    throw r.error("window_size", "= " + std::to_string(c.window_size) + " must be at least spatial_merge_size * "
                                 "patch_size = " + std::to_string(c.spatial_merge_size * c.patch_size));
  if (const nlohmann::json* list = r.find("fullatt_block_indexes")) {
    if (!list->is_array()) throw r.error("fullatt_block_indexes", "must be a list of integers");
    c.fullatt_block_indexes.clear();
    for (size_t i = 0; i < list->size(); ++i) {
      const nlohmann::json& v = (*list)[i];
      if (!v.is_number_integer())
        throw r.error(ConfigReader::indexed("fullatt_block_indexes", i),
                      "must be an integer, got " + ConfigReader::show(v));
      c.fullatt_block_indexes.push_back(v.get<int64_t>());
    }
  }
  return c;
}

}  // namespace dpinfer::pipeline

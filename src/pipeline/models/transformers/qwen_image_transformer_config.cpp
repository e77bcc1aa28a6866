#include "dpinfer/pipeline/models/transformers/qwen_image_transformer_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;


}  // namespace

// Ref: diffusers/models/transformers/transformer_qwenimage.py QwenImageTransformer2DModel.__init__
QwenImageTransformerConfig QwenImageTransformerConfig::from_json(const json& j) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  ConfigReader r(j, kComponent);
  QwenImageTransformerConfig c;
  c.patch_size = bounded_integer(r, "patch_size", r.integer("patch_size", c.patch_size), 1, kMaxPatch);
  c.in_channels = bounded_integer(r, "in_channels", r.integer("in_channels", c.in_channels), 1, kMaxWidth);
  // self.out_channels = out_channels or in_channels: null (and 0) mean in_channels; absent, the
  // signature's default 16 holds.
  if (j.contains("out_channels")) {
    c.out_channels = r.integer("out_channels", 0);
    if (c.out_channels == 0) c.out_channels = c.in_channels;
  }
  bounded_integer(r, "out_channels", c.out_channels, 1, kMaxWidth);
  c.num_layers = bounded_integer(r, "num_layers", r.integer("num_layers", c.num_layers), 0, kMaxLayers);
  c.attention_head_dim =
      bounded_integer(r, "attention_head_dim", r.integer("attention_head_dim", c.attention_head_dim), 1, kMaxWidth);
  c.num_attention_heads =
      bounded_integer(r, "num_attention_heads", r.integer("num_attention_heads", c.num_attention_heads), 1, kMaxWidth);
  if (c.inner_dim() > kMaxWidth)
    throw r.error("num_attention_heads", "* attention_head_dim = " + std::to_string(c.inner_dim()) +
                                             " must be at most " + std::to_string(kMaxWidth));
  c.joint_attention_dim =
      bounded_integer(r, "joint_attention_dim", r.integer("joint_attention_dim", c.joint_attention_dim), 1, kMaxWidth);
  c.guidance_embeds = r.boolean("guidance_embeds", c.guidance_embeds);
  c.axes_dims_rope = r.integers("axes_dims_rope", c.axes_dims_rope);
  // QwenEmbedRope builds tables for exactly three axes (frame, height, width).
  if (c.axes_dims_rope.size() != 3)
    throw r.error("axes_dims_rope", "must have 3 entries (frame, height, width), got " +
                                        std::to_string(c.axes_dims_rope.size()));
  int64_t sum = 0;
  for (size_t i = 0; i < c.axes_dims_rope.size(); ++i) {
    const std::string field = ConfigReader::indexed("axes_dims_rope", i);
    bounded_integer(r, field, c.axes_dims_rope[i], 1, kMaxWidth);
    if (c.axes_dims_rope[i] % 2 != 0)
      throw r.error(field, "= " + std::to_string(c.axes_dims_rope[i]) + " must be even");
    sum += c.axes_dims_rope[i];
  }
  if (sum != c.attention_head_dim)
    throw r.error("axes_dims_rope", "sum to " + std::to_string(sum) + ", but attention_head_dim is " +
                                        std::to_string(c.attention_head_dim));
  return c;
}

QwenImageTransformerConfig QwenImageTransformerConfig::from_file(const std::string& path) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  return config_from_file<QwenImageTransformerConfig>(path, kComponent);
}

}  // namespace dpinfer::pipeline

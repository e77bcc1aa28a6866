#include "dpinfer/pipeline/models/transformers/flux_transformer_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;


}  // namespace

// Ref: diffusers/models/transformers/transformer_flux.py FluxTransformer2DModel.__init__
FluxTransformerConfig FluxTransformerConfig::from_json(const json& j) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  ConfigReader r(j, kComponent);
  FluxTransformerConfig c;
  c.patch_size = bounded_integer_field(r, "patch_size", c.patch_size, 1, kMaxPatch);
  c.in_channels = bounded_integer_field(r, "in_channels", c.in_channels, 1, kMaxWidth);
  // self.out_channels = out_channels or in_channels: null, 0 and absent all mean in_channels.
  c.out_channels = j.contains("out_channels") ? r.integer("out_channels", 0) : 0;
  if (c.out_channels == 0) c.out_channels = c.in_channels;
  bounded_integer(r, "out_channels", c.out_channels, 1, kMaxWidth);
  c.num_layers = bounded_integer_field(r, "num_layers", c.num_layers, 0, kMaxLayers);
  c.num_single_layers = bounded_integer_field(r, "num_single_layers", c.num_single_layers, 0, kMaxLayers);
  c.attention_head_dim = bounded_integer_field(r, "attention_head_dim", c.attention_head_dim, 1, kMaxWidth);
  c.num_attention_heads = bounded_integer_field(r, "num_attention_heads", c.num_attention_heads, 1, kMaxWidth);
  if (c.inner_dim() > kMaxWidth)
    throw r.error("num_attention_heads", "* attention_head_dim = " + std::to_string(c.inner_dim()) +
                                             " must be at most " + std::to_string(kMaxWidth));
  c.joint_attention_dim = bounded_integer_field(r, "joint_attention_dim", c.joint_attention_dim, 1, kMaxWidth);
  c.pooled_projection_dim = bounded_integer_field(r, "pooled_projection_dim", c.pooled_projection_dim, 1, kMaxWidth);
  c.guidance_embeds = r.boolean("guidance_embeds", c.guidance_embeds);
  c.axes_dims_rope = r.integers("axes_dims_rope", c.axes_dims_rope);
  // FluxPipeline's ids have three columns (0, row, column); FluxPosEmbed reads one width per column.
  if (c.axes_dims_rope.size() != 3)
    throw r.error("axes_dims_rope", "must have 3 entries (one per id column), got " +
                                        std::to_string(c.axes_dims_rope.size()));
  int64_t sum = 0;
  for (size_t i = 0; i < c.axes_dims_rope.size(); ++i) {
    const std::string name = ConfigReader::indexed("axes_dims_rope", i);
    bounded_integer(r, name, c.axes_dims_rope[i], 1, kMaxWidth);
    if (c.axes_dims_rope[i] % 2 != 0) throw r.error(name, "= " + std::to_string(c.axes_dims_rope[i]) + " must be even");
    sum += c.axes_dims_rope[i];
  }
  if (sum != c.attention_head_dim)
    throw r.error("axes_dims_rope", "sum to " + std::to_string(sum) + ", but attention_head_dim is " +
                                        std::to_string(c.attention_head_dim));
  return c;
}

FluxTransformerConfig FluxTransformerConfig::from_file(const std::string& path) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  return config_from_file<FluxTransformerConfig>(path, kComponent);
}

}  // namespace dpinfer::pipeline

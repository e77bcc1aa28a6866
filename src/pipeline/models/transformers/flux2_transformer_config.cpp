#include "dpinfer/pipeline/models/transformers/flux2_transformer_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;


}  // namespace

// Ref: diffusers/models/transformers/transformer_flux2.py Flux2Transformer2DModel.__init__ (0.37.0)
Flux2TransformerConfig Flux2TransformerConfig::from_json(const json& j) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  ConfigReader r(j, kComponent);
  Flux2TransformerConfig c;
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
  c.timestep_guidance_channels =
      bounded_integer_field(r, "timestep_guidance_channels", c.timestep_guidance_channels, 2, kMaxWidth);
  c.mlp_ratio = r.number("mlp_ratio", c.mlp_ratio);
  if (!(c.mlp_ratio > 0) || !std::isfinite(c.mlp_ratio) || c.mlp_hidden_dim() < 1 || c.mlp_hidden_dim() > 16 * kMaxWidth)
    throw r.error("mlp_ratio", "must be positive and give a feed-forward width int(dim * mlp_ratio) in [1, " +
                                   std::to_string(16 * kMaxWidth) + "]");
  c.rope_theta = r.number("rope_theta", c.rope_theta);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) throw r.error("rope_theta", "must be positive");
  c.eps = r.number("eps", c.eps);
  if (!(c.eps > 0) || !std::isfinite(c.eps)) throw r.error("eps", "must be positive");
  c.guidance_embeds = r.boolean("guidance_embeds", c.guidance_embeds);
  c.axes_dims_rope = r.integers("axes_dims_rope", c.axes_dims_rope);
  // The pipelines' ids have four columns (T, H, W, L); Flux2PosEmbed reads one width per column.
  if (c.axes_dims_rope.size() != 4)
    throw r.error("axes_dims_rope", "must have 4 entries (one per id column: T, H, W, L), got " +
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

Flux2TransformerConfig Flux2TransformerConfig::from_file(const std::string& path) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  return config_from_file<Flux2TransformerConfig>(path, kComponent);
}

}  // namespace dpinfer::pipeline

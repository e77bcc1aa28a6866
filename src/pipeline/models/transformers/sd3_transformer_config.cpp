#include "dpinfer/pipeline/models/transformers/sd3_transformer_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;

constexpr int64_t kMaxPositions = 4096;

}  // namespace

bool SD3TransformerConfig::is_dual_attention_layer(int64_t index) const {
  return std::find(dual_attention_layers.begin(), dual_attention_layers.end(), index) != dual_attention_layers.end();
}

// Ref: diffusers/models/transformers/transformer_sd3.py SD3Transformer2DModel.__init__
SD3TransformerConfig SD3TransformerConfig::from_json(const json& j) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  ConfigReader r(j, kComponent);
  SD3TransformerConfig c;
  c.sample_size = bounded_integer_field(r, "sample_size", c.sample_size, 1, kMaxWidth);
  c.patch_size = bounded_integer_field(r, "patch_size", c.patch_size, 1, kMaxPatch);
  c.in_channels = bounded_integer_field(r, "in_channels", c.in_channels, 1, kMaxWidth);
  // self.out_channels = out_channels if out_channels is not None else in_channels
  if (j.contains("out_channels")) c.out_channels = r.integer("out_channels", c.in_channels);
  bounded_integer(r, "out_channels", c.out_channels, 1, kMaxWidth);
  c.num_layers = bounded_integer_field(r, "num_layers", c.num_layers, 1, kMaxLayers);
  c.attention_head_dim = bounded_integer_field(r, "attention_head_dim", c.attention_head_dim, 1, kMaxWidth);
  c.num_attention_heads = bounded_integer_field(r, "num_attention_heads", c.num_attention_heads, 1, kMaxWidth);
  if (c.inner_dim() > kMaxWidth)
    throw r.error("num_attention_heads", "* attention_head_dim = " + std::to_string(c.inner_dim()) +
                                             " must be at most " + std::to_string(kMaxWidth));
  c.joint_attention_dim = bounded_integer_field(r, "joint_attention_dim", c.joint_attention_dim, 1, kMaxWidth);
  c.caption_projection_dim = bounded_integer_field(r, "caption_projection_dim", c.caption_projection_dim, 1, kMaxWidth);
  // The text stream enters the blocks (Attention(added_kv_proj_dim=dim), AdaLayerNormZero(dim)) at
  // inner_dim: diffusers fails in the first block's matmul otherwise.
  if (c.caption_projection_dim != c.inner_dim())
    throw r.error("caption_projection_dim", "= " + std::to_string(c.caption_projection_dim) +
                                                " must be num_attention_heads * attention_head_dim = " +
                                                std::to_string(c.inner_dim()) + ", the width of the blocks");
  c.pooled_projection_dim = bounded_integer_field(r, "pooled_projection_dim", c.pooled_projection_dim, 1, kMaxWidth);
  // PatchEmbed builds an uncropped table of sample_size / patch_size positions when this is null;
  // every SD3 and SD3.5 checkpoint sets it, and dpinfer reads the cropped table from the weights.
  if (j.contains("pos_embed_max_size") && j["pos_embed_max_size"].is_null())
    throw r.error("pos_embed_max_size", "is null; dpinfer runs SD3 transformers with a cropped position table "
                                        "(pos_embed_max_size set), as SD3 and SD3.5 ship them");
  c.pos_embed_max_size = bounded_integer_field(r, "pos_embed_max_size", c.pos_embed_max_size, 1, kMaxPositions);
  if (r.has("dual_attention_layers")) {
    const json& v = j["dual_attention_layers"];
    if (!v.is_array()) throw r.error("dual_attention_layers", "must be a list of block indices");
    if (!v.empty()) c.dual_attention_layers = r.integers("dual_attention_layers", {});
    for (size_t i = 0; i < c.dual_attention_layers.size(); ++i)
      bounded_integer(r, ConfigReader::indexed("dual_attention_layers", i), c.dual_attention_layers[i], 0, kMaxLayers);
  }
  const std::string qk_norm = r.string("qk_norm", "");
  if (!qk_norm.empty() && qk_norm != "rms_norm") throw r.unsupported("qk_norm", j["qk_norm"], "null, \"rms_norm\"");
  c.qk_norm = qk_norm == "rms_norm";
  return c;
}

SD3TransformerConfig SD3TransformerConfig::from_file(const std::string& path) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  return config_from_file<SD3TransformerConfig>(path, kComponent);
}

}  // namespace dpinfer::pipeline

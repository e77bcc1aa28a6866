#include "dpinfer/pipeline/models/transformers/z_image_transformer_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;

constexpr int64_t kMaxAxisLen = 1 << 20;

}  // namespace

// Ref: diffusers/models/transformers/transformer_z_image.py ZImageTransformer2DModel.__init__
ZImageTransformerConfig ZImageTransformerConfig::from_json(const json& j) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  ConfigReader r(j, kComponent);
  ZImageTransformerConfig c;
  c.all_patch_size = r.integers("all_patch_size", c.all_patch_size);
  c.all_f_patch_size = r.integers("all_f_patch_size", c.all_f_patch_size);
  if (c.all_f_patch_size.size() != c.all_patch_size.size())
    throw r.error("all_f_patch_size", "must have one entry per all_patch_size entry (" +
                                          std::to_string(c.all_patch_size.size()) + "), got " +
                                          std::to_string(c.all_f_patch_size.size()));
  for (size_t i = 0; i < c.all_patch_size.size(); ++i) {
    bounded_integer(r, ConfigReader::indexed("all_patch_size", i), c.all_patch_size[i], 1, kMaxPatch);
    bounded_integer(r, ConfigReader::indexed("all_f_patch_size", i), c.all_f_patch_size[i], 1, kMaxPatch);
    for (size_t k = 0; k < i; ++k)
      if (c.all_patch_size[k] == c.all_patch_size[i] && c.all_f_patch_size[k] == c.all_f_patch_size[i])
        throw r.error(ConfigReader::indexed("all_patch_size", i), "repeats the patch size pair of entry " +
                                                                      std::to_string(k));
  }
  c.in_channels = bounded_integer_field(r, "in_channels", c.in_channels, 1, kMaxWidth);
  c.dim = bounded_integer_field(r, "dim", c.dim, 1, kMaxWidth);
  c.n_layers = bounded_integer_field(r, "n_layers", c.n_layers, 0, kMaxLayers);
  c.n_refiner_layers = bounded_integer_field(r, "n_refiner_layers", c.n_refiner_layers, 0, kMaxLayers);
  c.n_heads = bounded_integer_field(r, "n_heads", c.n_heads, 1, kMaxWidth);
  c.n_kv_heads = bounded_integer_field(r, "n_kv_heads", c.n_kv_heads, 1, kMaxWidth);
  c.norm_eps = r.number("norm_eps", c.norm_eps);
  if (!(c.norm_eps > 0)) throw r.error("norm_eps", "must be positive");
  c.qk_norm = r.boolean("qk_norm", c.qk_norm);
  c.cap_feat_dim = bounded_integer_field(r, "cap_feat_dim", c.cap_feat_dim, 1, kMaxWidth);
  c.rope_theta = r.number("rope_theta", c.rope_theta);
  if (!(c.rope_theta > 0)) throw r.error("rope_theta", "must be positive");
  c.t_scale = r.number("t_scale", c.t_scale);
  c.axes_dims = r.integers("axes_dims", c.axes_dims);
  c.axes_lens = r.integers("axes_lens", c.axes_lens);
  check_divisible(r, "dim", c.dim, "n_heads", c.n_heads);
  // The ids are (caption or frame, height, width): Z-Image's patchify makes three of them.
  if (c.axes_dims.size() != 3)
    throw r.error("axes_dims", "must have 3 entries (frame/caption, height, width), got " +
                                   std::to_string(c.axes_dims.size()));
  if (c.axes_lens.size() != c.axes_dims.size())
    throw r.error("axes_lens",
                  "must have one entry per axes_dims entry (3), got " + std::to_string(c.axes_lens.size()));
  int64_t sum = 0;
  for (size_t i = 0; i < c.axes_dims.size(); ++i) {
    const std::string field = ConfigReader::indexed("axes_dims", i);
    bounded_integer(r, field, c.axes_dims[i], 1, kMaxWidth);
    if (c.axes_dims[i] % 2 != 0) throw r.error(field, "= " + std::to_string(c.axes_dims[i]) + " must be even");
    bounded_integer(r, ConfigReader::indexed("axes_lens", i), c.axes_lens[i], 1, kMaxAxisLen);
    sum += c.axes_dims[i];
  }
  if (sum != c.head_dim())
    throw r.error("axes_dims", "sum to " + std::to_string(sum) + ", but the head dim dim / n_heads is " +
                                   std::to_string(c.head_dim()));
  return c;
}

ZImageTransformerConfig ZImageTransformerConfig::from_file(const std::string& path) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  return config_from_file<ZImageTransformerConfig>(path, kComponent);
}

}  // namespace dpinfer::pipeline

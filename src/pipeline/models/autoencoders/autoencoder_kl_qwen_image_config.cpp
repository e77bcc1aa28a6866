#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "../config_parsing.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;
constexpr const char* kQwenImageVaeConfig = "vae config";

// Bounds well above the real model (base_dim 96, z_dim 16, 4 levels, 2 res blocks), so that a
// corrupt config fails here and not in the allocator.
constexpr int64_t kMaxWidth = 1 << 14;
constexpr int64_t kMaxMult = 64;
constexpr int64_t kMaxLevels = 8;
constexpr int64_t kMaxResBlocks = 64;

/// A list of `n` finite numbers (z_dim of them), or the default when absent.
std::vector<double> per_channel(const ConfigReader& r, const std::string& key, std::vector<double> fallback,
                                size_t n, bool positive) {
  std::vector<double> v = r.numbers(key).value_or(std::move(fallback));
  if (v.size() != n)
    throw r.error(key, "must have one entry per latent channel (z_dim = " + std::to_string(n) + "), got " +
                           std::to_string(v.size()));
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) throw r.error(ConfigReader::indexed(key, i), "must be finite");
    if (positive && !(v[i] > 0)) throw r.error(ConfigReader::indexed(key, i), "must be positive");
  }
  return v;
}

}  // namespace

// Ref: diffusers/models/autoencoders/autoencoder_kl_qwenimage.py AutoencoderKLQwenImage.__init__
AutoencoderKLQwenImageConfig AutoencoderKLQwenImageConfig::from_json(const json& j) {
  ConfigReader r(j, kQwenImageVaeConfig);
  AutoencoderKLQwenImageConfig c;
  c.base_dim = bounded_integer_field(r, "base_dim", c.base_dim, 1, kMaxWidth);
  c.z_dim = bounded_integer_field(r, "z_dim", c.z_dim, 1, kMaxWidth);
  c.dim_mult = r.integers("dim_mult", c.dim_mult);
  if (static_cast<int64_t>(c.dim_mult.size()) > kMaxLevels)
    throw r.error("dim_mult", "has " + std::to_string(c.dim_mult.size()) + " levels, at most " +
                                  std::to_string(kMaxLevels) + " are supported");
  for (size_t i = 0; i < c.dim_mult.size(); ++i)
    bounded_integer(r, ConfigReader::indexed("dim_mult", i), c.dim_mult[i], 1, kMaxMult);
  c.num_res_blocks = bounded_integer_field(r, "num_res_blocks", c.num_res_blocks, 1, kMaxResBlocks);
  c.attn_scales = r.numbers("attn_scales").value_or(c.attn_scales);

  // diffusers indexes temperal_downsample[i] for each level transition and takes
  // 2^len(temperal_downsample) as the scale factor: any other length builds a model whose
  // scale factor is not the pipeline's.
  if (const json* v = r.find("temperal_downsample")) {
    if (!v->is_array()) throw r.error("temperal_downsample", "must be a list of booleans, got " + r.show(*v));
    c.temperal_downsample.clear();
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_boolean())
        throw r.error(ConfigReader::indexed("temperal_downsample", i), "must be true or false, got " + r.show((*v)[i]));
      c.temperal_downsample.push_back((*v)[i].get<bool>());
    }
  }
  if (c.temperal_downsample.size() + 1 != c.dim_mult.size())
    throw r.error("temperal_downsample", "must have one entry per dim_mult entry but the last (" +
                                             std::to_string(c.dim_mult.size() - 1) + "), got " +
                                             std::to_string(c.temperal_downsample.size()));

  c.dropout = r.number("dropout", c.dropout);
  if (!(c.dropout >= 0 && c.dropout < 1)) throw r.error("dropout", "must be in [0, 1)");
  const size_t z = static_cast<size_t>(c.z_dim);
  c.latents_mean = per_channel(r, "latents_mean", c.latents_mean, z, /*positive=*/false);
  // The pipeline multiplies by latents_std (it divides by 1 / latents_std).
  c.latents_std = per_channel(r, "latents_std", c.latents_std, z, /*positive=*/true);
  return c;
}

AutoencoderKLQwenImageConfig AutoencoderKLQwenImageConfig::from_file(const std::string& path) {
  return config_from_file<AutoencoderKLQwenImageConfig>(path, kQwenImageVaeConfig);
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;
constexpr const char* kVAE = "vae config";

}  // namespace

// Ref: diffusers/models/autoencoders/autoencoder_kl.py AutoencoderKL.__init__
AutoencoderKLConfig AutoencoderKLConfig::from_json(const json& j) {
  ConfigReader r(j, kVAE);
  AutoencoderKLConfig config;
  config.in_channels = r.positive("in_channels", config.in_channels);
  config.out_channels = r.positive("out_channels", config.out_channels);
  config.block_out_channels = r.integers("block_out_channels", config.block_out_channels);
  const size_t n = config.block_out_channels.size();
  std::vector<std::string> down = r.strings("down_block_types", {"DownEncoderBlock2D"});
  std::vector<std::string> up = r.strings("up_block_types", {"UpDecoderBlock2D"});
  for (size_t i = 0; i < down.size(); ++i)
    if (down[i] != "DownEncoderBlock2D")
      throw r.unsupported(ConfigReader::indexed("down_block_types", i), down[i], "DownEncoderBlock2D");
  for (size_t i = 0; i < up.size(); ++i)
    if (up[i] != "UpDecoderBlock2D")
      throw r.unsupported(ConfigReader::indexed("up_block_types", i), up[i], "UpDecoderBlock2D");
  if (down.size() != n || up.size() != n)
    throw r.error("block_out_channels", "must have one entry per down and up block (" +
                                            std::to_string(down.size()) + " down, " + std::to_string(up.size()) +
                                            " up), got " + std::to_string(n));
  config.layers_per_block = r.positive("layers_per_block", config.layers_per_block);
  config.latent_channels = r.positive("latent_channels", config.latent_channels);
  config.norm_num_groups = r.positive("norm_num_groups", config.norm_num_groups);
  if (const json* v = r.find("sample_size"); v != nullptr && v->is_array()) {
    config.sample_size = r.integers("sample_size", {})[0];
    config.sample_size_is_list = true;
  } else {
    config.sample_size = r.positive("sample_size", config.sample_size);
  }
  config.scaling_factor = r.number("scaling_factor", config.scaling_factor);
  if (r.find("shift_factor") != nullptr) config.shift_factor = r.number("shift_factor", 0);
  config.latents_mean = r.numbers("latents_mean");
  config.latents_std = r.numbers("latents_std");
  config.force_upcast = r.boolean("force_upcast", config.force_upcast);
  config.use_quant_conv = r.boolean("use_quant_conv", config.use_quant_conv);
  config.use_post_quant_conv = r.boolean("use_post_quant_conv", config.use_post_quant_conv);
  config.mid_block_add_attention = r.boolean("mid_block_add_attention", config.mid_block_add_attention);
  std::string act = r.string("act_fn", "silu");
  if (act != "silu" && act != "swish") throw r.unsupported("act_fn", act, join({"silu", "swish"}));
  for (size_t i = 0; i < n; ++i) {
    std::string boc = ConfigReader::indexed("block_out_channels", i);
    if (config.block_out_channels[i] <= 0) throw r.error(boc, "must be positive");
    check_divisible(r, boc, config.block_out_channels[i], "norm_num_groups", config.norm_num_groups);
  }
  return config;
}

AutoencoderKLConfig AutoencoderKLConfig::from_file(const std::string& path) {
  return config_from_file<AutoencoderKLConfig>(path, kVAE);
}

}  // namespace dpinfer::pipeline

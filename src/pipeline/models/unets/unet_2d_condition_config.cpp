#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;
constexpr const char* kUNet = "unet config";

}  // namespace

// Ref: diffusers/models/unets/unet_2d_condition.py UNet2DConditionModel.__init__ and _check_config
UNetConfig UNetConfig::from_json(const json& j) {
  ConfigReader r(j, kUNet);
  UNetConfig config;

  if (const json* v = r.find("sample_size")) {
    if (v->is_number_integer()) {
      config.sample_size = std::array<int64_t, 2>{v->get<int64_t>(), v->get<int64_t>()};
    } else {
      std::vector<int64_t> hw = r.integers("sample_size", {});
      if (hw.size() != 2) throw r.error("sample_size", "must be an integer or [height, width], got " + ConfigReader::show(*v));
      config.sample_size = std::array<int64_t, 2>{hw[0], hw[1]};
    }
  }
  config.in_channels = r.positive("in_channels", config.in_channels);
  config.out_channels = r.positive("out_channels", config.out_channels);
  config.center_input_sample = r.boolean("center_input_sample", config.center_input_sample);
  config.flip_sin_to_cos = r.boolean("flip_sin_to_cos", config.flip_sin_to_cos);
  config.freq_shift = r.number("freq_shift", config.freq_shift);

  std::vector<std::string> down = r.strings(
      "down_block_types", {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"});
  std::vector<std::string> up =
      r.strings("up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"});
  for (size_t i = 0; i < down.size(); ++i) {
    // diffusers' get_down_block strips a "UNetRes" prefix (UNetResDownBlock2D is DownBlock2D).
    std::string type = down[i].rfind("UNetRes", 0) == 0 ? down[i].substr(7) : down[i];
    if (type == "CrossAttnDownBlock2D") {
      config.down_block_types.push_back(DownBlockType::kCrossAttnDownBlock2D);
    } else if (type == "DownBlock2D") {
      config.down_block_types.push_back(DownBlockType::kDownBlock2D);
    } else {
      throw r.unsupported(ConfigReader::indexed("down_block_types", i), down[i],
                          join({"CrossAttnDownBlock2D", "DownBlock2D"}));
    }
  }
  for (size_t i = 0; i < up.size(); ++i) {
    std::string type = up[i].rfind("UNetRes", 0) == 0 ? up[i].substr(7) : up[i];
    if (type == "CrossAttnUpBlock2D") {
      config.up_block_types.push_back(UpBlockType::kCrossAttnUpBlock2D);
    } else if (type == "UpBlock2D") {
      config.up_block_types.push_back(UpBlockType::kUpBlock2D);
    } else {
      throw r.unsupported(ConfigReader::indexed("up_block_types", i), up[i], join({"CrossAttnUpBlock2D", "UpBlock2D"}));
    }
  }
  if (const json* v = r.find("mid_block_type")) {
    std::string type = r.string("mid_block_type", "");
    if (type == "UNetMidBlock2DCrossAttn") {
      config.mid_block_type = MidBlockType::kUNetMidBlock2DCrossAttn;
    } else if (type == "UNetMidBlock2D") {
      config.mid_block_type = MidBlockType::kUNetMidBlock2D;
    } else {
      throw r.unsupported("mid_block_type", *v, join({"UNetMidBlock2DCrossAttn", "UNetMidBlock2D", "null"}));
    }
  } else if (j.contains("mid_block_type")) {
    config.mid_block_type = MidBlockType::kNone;  // explicitly null
  }

  const size_t n = down.size();
  config.block_out_channels = r.integers("block_out_channels", {320, 640, 1280, 1280});
  if (up.size() != n)
    throw r.error("up_block_types", "must have as many entries as down_block_types (" + std::to_string(n) +
                                        "), got " + std::to_string(up.size()));
  if (config.block_out_channels.size() != n)
    throw r.error("block_out_channels", "must have one entry per down block (" + std::to_string(n) + "), got " +
                                            std::to_string(config.block_out_channels.size()));
  config.layers_per_block = r.per_block("layers_per_block", 2, n);
  if (const json* v = r.find("transformer_layers_per_block"); v != nullptr && v->is_array()) {
    for (const json& item : *v)
      if (item.is_array())
        throw r.error("transformer_layers_per_block",
                      "with nested lists (asymmetric up blocks, reverse_transformer_layers_per_block) is not "
                      "supported; use an integer or one integer per down block");
  }
  config.transformer_layers_per_block = r.per_block("transformer_layers_per_block", 1, n);
  // Ref: unet_2d_condition.py `num_attention_heads = num_attention_heads or attention_head_dim`. diffusers 0.36
  // itself refuses num_attention_heads; when a config sets it, it is the head count and wins.
  config.num_attention_heads = r.find("num_attention_heads") != nullptr ? r.per_block("num_attention_heads", 8, n)
                                                                        : r.per_block("attention_head_dim", 8, n);
  config.cross_attention_dim = r.per_block("cross_attention_dim", 1280, n);
  config.only_cross_attention = r.per_block_bool("only_cross_attention", false, n);
  config.downsample_padding = r.integer("downsample_padding", config.downsample_padding);
  config.mid_block_scale_factor = r.number("mid_block_scale_factor", config.mid_block_scale_factor);
  config.resnet_out_scale_factor = r.number("resnet_out_scale_factor", config.resnet_out_scale_factor);
  config.norm_num_groups = r.positive("norm_num_groups", config.norm_num_groups);
  config.norm_eps = r.number("norm_eps", config.norm_eps);
  config.use_linear_projection = r.boolean("use_linear_projection", config.use_linear_projection);
  config.upcast_attention = r.boolean("upcast_attention", config.upcast_attention);
  config.conv_in_kernel = r.positive("conv_in_kernel", config.conv_in_kernel);
  config.conv_out_kernel = r.positive("conv_out_kernel", config.conv_out_kernel);
  if (r.find("time_cond_proj_dim") != nullptr) config.time_cond_proj_dim = r.positive("time_cond_proj_dim", 1);

  std::string act = r.string("act_fn", "silu");
  if (act != "silu" && act != "swish") throw r.unsupported("act_fn", act, join({"silu", "swish"}));
  r.require_string("time_embedding_type", "positional", "positional");
  r.require_string("resnet_time_scale_shift", "default", "default");
  r.require_string("attention_type", "default", "default");
  for (const char* key : {"class_embed_type", "num_class_embeds", "encoder_hid_dim", "encoder_hid_dim_type",
                          "time_embedding_act_fn", "timestep_post_act", "reverse_transformer_layers_per_block",
                          "cross_attention_norm"})
    r.require_null(key);
  // SDXL's added conditioning: the pooled text embedding and six micro-conditioning ids.
  if (const json* v = r.find("addition_embed_type")) {
    if (r.string("addition_embed_type", "") != "text_time")
      throw r.unsupported("addition_embed_type", *v, "text_time, null");
    config.addition_embed_type = UNetConfig::AdditionEmbedType::kTextTime;
    config.addition_time_embed_dim = r.positive("addition_time_embed_dim", 256);
    if (!r.has("projection_class_embeddings_input_dim"))
      throw r.error("projection_class_embeddings_input_dim",
                    "is required with addition_embed_type text_time (pooled width + 6 * addition_time_embed_dim)");
    config.projection_class_embeddings_input_dim = r.positive("projection_class_embeddings_input_dim", 1);
    if (config.projection_class_embeddings_input_dim <= 6 * config.addition_time_embed_dim)
      throw r.error("projection_class_embeddings_input_dim",
                    "= " + std::to_string(config.projection_class_embeddings_input_dim) +
                        " leaves no room for the pooled text embedding beside 6 * addition_time_embed_dim = " +
                        std::to_string(6 * config.addition_time_embed_dim));
  }
  for (const char* key : {"dual_cross_attention", "class_embeddings_concat", "resnet_skip_time_act"})
    r.require_false(key);
  if (r.find("time_embedding_dim") != nullptr) {
    config.time_embed_dim = r.positive("time_embedding_dim", 1);
  } else {
    config.time_embed_dim = 4 * config.block_out_channels[0];
  }

  for (size_t i = 0; i < n; ++i) {
    std::string boc = ConfigReader::indexed("block_out_channels", i);
    if (config.block_out_channels[i] <= 0) throw r.error(boc, "must be positive");
    check_divisible(r, boc, config.block_out_channels[i], "norm_num_groups", config.norm_num_groups);
    if (config.layers_per_block[i] <= 0) throw r.error(ConfigReader::indexed("layers_per_block", i), "must be positive");
    if (config.num_attention_heads[i] <= 0)
      throw r.error(ConfigReader::indexed("attention_head_dim", i), "(the number of heads) must be positive");
    bool attends = config.down_block_types[i] == DownBlockType::kCrossAttnDownBlock2D ||
                   config.up_block_types[n - 1 - i] == UpBlockType::kCrossAttnUpBlock2D ||
                   (i == n - 1 && config.mid_block_type == MidBlockType::kUNetMidBlock2DCrossAttn);
    if (attends)
      check_divisible(r, boc, config.block_out_channels[i],
                      "the head count " + ConfigReader::indexed("attention_head_dim", i), config.num_attention_heads[i]);
  }
  return config;
}

UNetConfig UNetConfig::from_file(const std::string& path) { return config_from_file<UNetConfig>(path, kUNet); }

}  // namespace dpinfer::pipeline

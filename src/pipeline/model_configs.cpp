#include "dpinfer/pipeline/model_configs.h"

#include <nlohmann/json.hpp>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/python_json.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

std::string show(const json& value) { return value.is_string() ? "'" + value.get<std::string>() + "'" : value.dump(); }

// Typed access to one config.json object; every error names `component_` and the field.
class ConfigReader {
 public:
  ConfigReader(const json& object, std::string component) : json_(object), component_(std::move(component)) {
    if (!json_.is_object()) throw Error(component_ + ": expected a json object, got " + show(json_));
  }

  // Absent and null both mean "use the default", as in the reference libraries.
  const json* find(const char* key) const {
    auto it = json_.find(key);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }

  Error error(const std::string& field, const std::string& what) const {
    return Error(component_ + ": " + field + " " + what);
  }

  Error unsupported(const std::string& field, const json& value, const std::string& supported) const {
    return error(field, show(value) + " is not supported; supported: " + supported);
  }

  int64_t integer(const char* key, int64_t fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    return as_integer(*v, key);
  }

  int64_t positive(const char* key, int64_t fallback) const {
    int64_t v = integer(key, fallback);
    if (v <= 0) throw error(key, "must be positive, got " + std::to_string(v));
    return v;
  }

  double number(const char* key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    std::optional<double> d = io::python_json_number(*v);
    if (!d) throw error(key, "must be a number, got " + show(*v));
    return *d;
  }

  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) throw error(key, "must be true or false, got " + show(*v));
    return v->get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) throw error(key, "must be a string, got " + show(*v));
    return v->get<std::string>();
  }

  std::vector<std::string> strings(const char* key, std::vector<std::string> fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_array() || v->empty()) throw error(key, "must be a non-empty list of strings, got " + show(*v));
    std::vector<std::string> out;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) throw error(indexed(key, i), "must be a string, got " + show((*v)[i]));
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  std::vector<int64_t> integers(const char* key, std::vector<int64_t> fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_array() || v->empty()) throw error(key, "must be a non-empty list of integers, got " + show(*v));
    std::vector<int64_t> out;
    for (size_t i = 0; i < v->size(); ++i) out.push_back(as_integer((*v)[i], indexed(key, i)));
    return out;
  }

  std::optional<std::vector<double>> numbers(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) throw error(key, "must be a list of numbers, got " + show(*v));
    std::vector<double> out;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_number()) throw error(indexed(key, i), "must be a number, got " + show((*v)[i]));
      out.push_back((*v)[i].get<double>());
    }
    return out;
  }

  // diffusers' "int or one per block" settings, expanded to `n` entries.
  std::vector<int64_t> per_block(const char* key, int64_t fallback, size_t n) const {
    const json* v = find(key);
    if (v == nullptr) return std::vector<int64_t>(n, fallback);
    if (v->is_array()) {
      if (v->size() != n)
        throw error(key, "must be an integer or a list of " + std::to_string(n) + " (one per down block), got " +
                             show(*v));
      std::vector<int64_t> out;
      for (size_t i = 0; i < n; ++i) out.push_back(as_integer((*v)[i], indexed(key, i)));
      return out;
    }
    return std::vector<int64_t>(n, as_integer(*v, key));
  }

  std::vector<bool> per_block_bool(const char* key, bool fallback, size_t n) const {
    const json* v = find(key);
    if (v == nullptr) return std::vector<bool>(n, fallback);
    if (v->is_boolean()) return std::vector<bool>(n, v->get<bool>());
    if (!v->is_array() || v->size() != n)
      throw error(key, "must be true, false or a list of " + std::to_string(n) + " booleans, got " + show(*v));
    std::vector<bool> out;
    for (size_t i = 0; i < n; ++i) {
      if (!(*v)[i].is_boolean()) throw error(indexed(key, i), "must be true or false, got " + show((*v)[i]));
      out.push_back((*v)[i].get<bool>());
    }
    return out;
  }

  // A setting dpinfer does not implement must be absent, null, or its inert value.
  void require_null(const char* key) const {
    if (const json* v = find(key)) throw unsupported(key, *v, "null");
  }
  void require_false(const char* key) const {
    if (boolean(key, false)) throw unsupported(key, true, "false");
  }
  void require_string(const char* key, const char* only, const char* fallback) const {
    std::string v = string(key, fallback);
    if (v != only) throw unsupported(key, v, only);
  }

  static std::string indexed(const std::string& key, size_t i) { return key + "[" + std::to_string(i) + "]"; }

 private:
  int64_t as_integer(const json& v, const std::string& field) const {
    if (!v.is_number_integer()) throw error(field, "must be an integer, got " + show(v));
    return v.get<int64_t>();
  }

  const json& json_;
  std::string component_;
};

template <typename Config>
Config parse_file(const std::string& path, const std::string& component) {
  json j;
  try {
    j = io::read_json_file(path, "fix or re-download it");
  } catch (const Error& e) {
    throw Error(component + ": " + e.what());
  }
  try {
    return Config::from_json(j);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in '" + path + "')");
  }
}

void check_divisible(const ConfigReader& r, const std::string& field, int64_t value, const std::string& by_name,
                     int64_t by) {
  if (value % by != 0)
    throw r.error(field, "= " + std::to_string(value) + " must be divisible by " + by_name + " = " +
                             std::to_string(by));
}

constexpr const char* kText = "text encoder config";
constexpr const char* kUNet = "unet config";
constexpr const char* kVAE = "vae config";

}  // namespace

// Ref: transformers/models/clip/configuration_clip.py CLIPTextConfig
CLIPTextConfig CLIPTextConfig::from_json(const json& j) {
  ConfigReader r(j, kText);
  CLIPTextConfig config;
  config.vocab_size = r.positive("vocab_size", config.vocab_size);
  config.hidden_size = r.positive("hidden_size", config.hidden_size);
  config.intermediate_size = r.positive("intermediate_size", config.intermediate_size);
  config.num_hidden_layers = r.positive("num_hidden_layers", config.num_hidden_layers);
  config.num_attention_heads = r.positive("num_attention_heads", config.num_attention_heads);
  config.max_position_embeddings = r.positive("max_position_embeddings", config.max_position_embeddings);
  config.layer_norm_eps = r.number("layer_norm_eps", config.layer_norm_eps);
  config.eos_token_id = r.integer("eos_token_id", config.eos_token_id);
  std::string act = r.string("hidden_act", "quick_gelu");
  if (act == "quick_gelu") {
    config.hidden_act = Activation::kQuickGELU;
  } else if (act == "gelu") {
    config.hidden_act = Activation::kGELU;
  } else {
    throw r.unsupported("hidden_act", act, join({"quick_gelu", "gelu"}));
  }
  check_divisible(r, "hidden_size", config.hidden_size, "num_attention_heads", config.num_attention_heads);
  return config;
}

CLIPTextConfig CLIPTextConfig::from_file(const std::string& path) { return parse_file<CLIPTextConfig>(path, kText); }

// Ref: diffusers/models/unets/unet_2d_condition.py UNet2DConditionModel.__init__ and _check_config
UNetConfig UNetConfig::from_json(const json& j) {
  ConfigReader r(j, kUNet);
  UNetConfig config;

  if (const json* v = r.find("sample_size")) {
    if (v->is_number_integer()) {
      config.sample_size = std::array<int64_t, 2>{v->get<int64_t>(), v->get<int64_t>()};
    } else {
      std::vector<int64_t> hw = r.integers("sample_size", {});
      if (hw.size() != 2) throw r.error("sample_size", "must be an integer or [height, width], got " + show(*v));
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
  for (const char* key : {"class_embed_type", "num_class_embeds", "addition_embed_type", "encoder_hid_dim",
                          "encoder_hid_dim_type", "time_embedding_act_fn", "timestep_post_act",
                          "reverse_transformer_layers_per_block", "cross_attention_norm"})
    r.require_null(key);
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

UNetConfig UNetConfig::from_file(const std::string& path) { return parse_file<UNetConfig>(path, kUNet); }

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
  return parse_file<AutoencoderKLConfig>(path, kVAE);
}

}  // namespace dpinfer::pipeline

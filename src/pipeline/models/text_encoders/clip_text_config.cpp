#include "dpinfer/pipeline/models/text_encoders/clip_text_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;
constexpr const char* kClipTextConfig = "text encoder config";

}  // namespace

// Ref: transformers/models/clip/configuration_clip.py CLIPTextConfig
CLIPTextConfig CLIPTextConfig::from_json(const json& j) {
  ConfigReader r(j, kClipTextConfig);
  CLIPTextConfig config;
  config.vocab_size = r.positive("vocab_size", config.vocab_size);
  config.hidden_size = r.positive("hidden_size", config.hidden_size);
  config.intermediate_size = r.positive("intermediate_size", config.intermediate_size);
  config.num_hidden_layers = r.positive("num_hidden_layers", config.num_hidden_layers);
  config.num_attention_heads = r.positive("num_attention_heads", config.num_attention_heads);
  config.max_position_embeddings = r.positive("max_position_embeddings", config.max_position_embeddings);
  config.layer_norm_eps = r.number("layer_norm_eps", config.layer_norm_eps);
  config.eos_token_id = r.integer("eos_token_id", config.eos_token_id);
  config.projection_dim = r.positive("projection_dim", config.projection_dim);
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

CLIPTextConfig CLIPTextConfig::from_file(const std::string& path) { return config_from_file<CLIPTextConfig>(path, kClipTextConfig); }

}  // namespace dpinfer::pipeline

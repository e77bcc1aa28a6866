#include "dpinfer/pipeline/models/text_encoders/decoder_llm_config.h"

#include <cmath>
#include <utility>
#include <nlohmann/json.hpp>

#include "../config_parsing.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;
constexpr const char* kDecoderLlmConfig = "text encoder config";

// What both classes read the same way. `c` holds the class's defaults.
void read_common(const ConfigReader& r, DecoderLLMConfig& c) {
  c.vocab_size = r.positive("vocab_size", c.vocab_size);
  c.hidden_size = r.positive("hidden_size", c.hidden_size);
  c.intermediate_size = r.positive("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = r.positive("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.positive("num_attention_heads", c.num_attention_heads);
  // transformers: num_key_value_heads None means plain multi-head attention.
  c.num_key_value_heads = r.positive("num_key_value_heads", c.num_attention_heads);
  c.rms_norm_eps = r.number("rms_norm_eps", c.rms_norm_eps);
  if (!(c.rms_norm_eps >= 0.0))
    throw r.error("rms_norm_eps", "must be >= 0, got " + ConfigReader::show(c.rms_norm_eps));
  c.rope_theta = r.number("rope_theta", c.rope_theta);
  if (!(c.rope_theta > 0.0) || c.rope_theta == INFINITY)
    throw r.error("rope_theta", "must be a positive number, got " + ConfigReader::show(c.rope_theta));
  c.max_position_embeddings = r.positive("max_position_embeddings", c.max_position_embeddings);
  r.require_string("hidden_act", "silu", "silu");
  // Sliding-window layers would need another mask; neither model's checkpoints enable them.
  r.require_false("use_sliding_window");
  if (r.has("layer_types")) {
    const std::vector<std::string> types = r.strings("layer_types", {});
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != "full_attention")
        throw r.unsupported(ConfigReader::indexed("layer_types", i), types[i], "full_attention");
  }
  check_divisible(r, "num_attention_heads", c.num_attention_heads, "num_key_value_heads", c.num_key_value_heads);
}

// The rope_scaling of a text config: absent, or the default rule (no scaling). Returns the object, or nullptr.
const json* default_rope_scaling(const ConfigReader& r) {
  const json* rs = r.find("rope_scaling");
  if (rs == nullptr) return nullptr;
  if (!rs->is_object()) throw r.error("rope_scaling", "must be an object or null, got " + ConfigReader::show(*rs));
  ConfigReader s(*rs, r.where() + " rope_scaling");
  // Qwen2.5-VL's config turns the legacy "type": "mrope" into "default" (mrope does default RoPE maths).
  for (const char* key : {"rope_type", "type"}) {
    const std::string t = s.string(key, "default");
    if (t != "default" && t != "mrope") throw r.unsupported(std::string("rope_scaling.") + key, t, "default, mrope");
  }
  return rs;
}

void check_head_dim(const ConfigReader& r, const DecoderLLMConfig& c) {
  if (c.head_dim % 2 != 0)
    throw r.error("head_dim", "= " + std::to_string(c.head_dim) + " must be even (rotary embeddings rotate pairs)");
}

}  // namespace

// Ref: transformers/models/qwen2_5_vl/configuration_qwen2_5_vl.py Qwen2_5_VLConfig, Qwen2_5_VLTextConfig;
// modeling_qwen2_5_vl.py Qwen2_5_VLAttention (head_dim = hidden_size // num_heads, q/k/v bias, no o_proj bias)
DecoderLLMConfig DecoderLLMConfig::qwen2_5_vl_from_json(const json& j) {
  ConfigReader top(j, kDecoderLlmConfig);
  const json* text = top.find("text_config");
  const ConfigReader r = text != nullptr ? ConfigReader(*text, std::string(kDecoderLlmConfig) + " text_config") : top;
  DecoderLLMConfig c;
  c.vocab_size = 152064;
  c.hidden_size = 8192;
  c.intermediate_size = 29568;
  c.num_hidden_layers = 80;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 8;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 1000000.0;
  read_common(r, c);
  check_divisible(r, "hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  // A head_dim key would change the rotary width (modeling_rope_utils reads it) but not the heads.
  if (r.has("head_dim") && r.integer("head_dim", 0) != c.head_dim)
    throw r.error("head_dim", "= " + std::to_string(r.integer("head_dim", 0)) +
                                  " differs from hidden_size / num_attention_heads = " + std::to_string(c.head_dim));
  check_head_dim(r, c);
  c.qkv_bias = true;
  c.o_bias = false;
  c.qk_norm = false;
  c.positions_from_mask = true;
  c.prefix = "model";
  const json* rs = default_rope_scaling(r);
  if (rs == nullptr) throw r.error("rope_scaling", "is missing; Qwen2.5-VL needs its mrope_section");
  c.mrope_section = ConfigReader(*rs, r.where() + " rope_scaling").integers("mrope_section", {});
  if (c.mrope_section.empty()) throw r.error("rope_scaling.mrope_section", "is missing");
  int64_t sum = 0;
  for (size_t i = 0; i < c.mrope_section.size(); ++i) {
    if (c.mrope_section[i] < 0)
      throw r.error(ConfigReader::indexed("rope_scaling.mrope_section", i), "must be >= 0");
    sum += c.mrope_section[i];
  }
  if (c.mrope_section.size() != 3 || 2 * sum != c.head_dim)
    throw r.error("rope_scaling.mrope_section", "must be 3 sections summing to head_dim / 2 = " +
                                                    std::to_string(c.head_dim / 2) + ", got " +
                                                    ConfigReader::show(json(c.mrope_section)));
  // The image tokens are Qwen2_5_VLConfig's own arguments, at the top level in both layouts: its __setattr__
  // writes them into text_config when that has the key too, so the top-level value (or the default) is what
  // get_rope_index reads. vision_config is also a top-level argument (absent or null: Qwen2_5_VLVisionConfig()).
  c.image_token_id = top.integer("image_token_id", c.image_token_id);
  c.video_token_id = top.integer("video_token_id", c.video_token_id);
  c.vision_start_token_id = top.integer("vision_start_token_id", c.vision_start_token_id);
  for (const auto& [key, id] : {std::pair{"image_token_id", c.image_token_id},
                                std::pair{"vision_start_token_id", c.vision_start_token_id}})
    if (id < 0) throw top.error(key, "must be >= 0, got " + std::to_string(id));
  if (c.image_token_id == c.vision_start_token_id)
    throw top.error("image_token_id", "= " + std::to_string(c.image_token_id) + " is also vision_start_token_id");
  if (const json* vision = top.find("vision_config"); vision != nullptr) {
    const ConfigReader v(*vision, top.where() + " vision_config");
    c.spatial_merge_size = v.positive("spatial_merge_size", c.spatial_merge_size);
    c.tokens_per_second = v.number("tokens_per_second", c.tokens_per_second);
    // get_rope_index multiplies an image's frame index 0 by it: 0 only while it is finite.
    if (!std::isfinite(c.tokens_per_second))
      throw v.error("tokens_per_second", "must be a finite number, got " + ConfigReader::show(c.tokens_per_second));
  }
  return c;
}

// Ref: transformers/models/qwen3/configuration_qwen3.py Qwen3Config; modeling_qwen3.py Qwen3Attention
DecoderLLMConfig DecoderLLMConfig::qwen3_from_json(const json& j) {
  ConfigReader r(j, kDecoderLlmConfig);
  DecoderLLMConfig c;  // the defaults are Qwen3Config's
  read_common(r, c);
  // Qwen3Config stores head_dim as given; a null would reach the attention as None.
  if (j.contains("head_dim") && j["head_dim"].is_null())
    throw r.error("head_dim", "must be a positive integer, got null");
  c.head_dim = r.positive("head_dim", c.head_dim);
  check_head_dim(r, c);
  const bool bias = r.boolean("attention_bias", false);
  c.qkv_bias = bias;
  c.o_bias = bias;
  c.qk_norm = true;
  c.positions_from_mask = false;
  c.prefix = "";
  if (const json* rs = default_rope_scaling(r); rs != nullptr && rs->contains("mrope_section"))
    throw r.error("rope_scaling.mrope_section", "is not a Qwen3 setting");
  return c;
}

// Ref: transformers/models/mistral3/configuration_mistral3.py Mistral3Config (text_config, model_type
// "mistral" by default); mistral/configuration_mistral.py MistralConfig; modeling_mistral.py MistralAttention
// (head_dim = config.head_dim or hidden_size // num_attention_heads, no biases), MistralModel.forward
// (position_ids = cache_position whatever the mask; the sliding-window mask when sliding_window is set).
DecoderLLMConfig DecoderLLMConfig::mistral3_from_json(const json& j) {
  ConfigReader top(j, kDecoderLlmConfig);
  const json* text = top.find("text_config");
  if (text == nullptr || !text->is_object())
    throw top.error("text_config", "must be an object (Mistral3Config's text model); this is not a Mistral 3 config");
  const ConfigReader r(*text, std::string(kDecoderLlmConfig) + " text_config");
  const std::string type = r.string("model_type", "mistral");
  if (type != "mistral") throw r.unsupported("model_type", type, "mistral");
  DecoderLLMConfig c;  // MistralConfig's defaults
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096 * 32;
  read_common(r, c);
  // MistralConfig: num_key_value_heads is 8 when the key is absent, the heads when it is null (read_common's rule).
  if (!text->contains("num_key_value_heads")) {
    c.num_key_value_heads = 8;
    check_divisible(r, "num_attention_heads", c.num_attention_heads, "num_key_value_heads", c.num_key_value_heads);
  }
  // MistralAttention: getattr(config, "head_dim", None) or hidden_size // heads (a null or 0 falls back).
  const int64_t head_dim = r.integer("head_dim", 0);
  if (head_dim < 0) throw r.error("head_dim", "must be a positive integer or null, got " + std::to_string(head_dim));
  if (head_dim > 0) {
    c.head_dim = head_dim;
  } else {
    check_divisible(r, "hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  check_head_dim(r, c);
  // MistralConfig's sliding_window is 4096 when the key is absent; null turns it off.
  if (!text->contains("sliding_window"))
    c.sliding_window = 4096;
  else if (!(*text)["sliding_window"].is_null())
    c.sliding_window = r.positive("sliding_window", 0);
  c.qkv_bias = false;
  c.o_bias = false;
  c.qk_norm = false;
  c.positions_from_mask = false;
  c.prefix = "language_model.model";
  default_rope_scaling(r);
  return c;
}

DecoderLLMConfig DecoderLLMConfig::qwen2_5_vl_from_file(const std::string& path) {
  return config_from_file(path, kDecoderLlmConfig, [](const json& j) { return qwen2_5_vl_from_json(j); });
}

DecoderLLMConfig DecoderLLMConfig::qwen3_from_file(const std::string& path) {
  return config_from_file(path, kDecoderLlmConfig, [](const json& j) { return qwen3_from_json(j); });
}

}  // namespace dpinfer::pipeline

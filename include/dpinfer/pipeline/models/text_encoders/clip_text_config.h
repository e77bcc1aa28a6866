#pragma once
// transformers' CLIPTextConfig: text_encoder/config.json of the CLIP text encoders, resolved.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// transformers' CLIPTextConfig (text_encoder/config.json).
struct CLIPTextConfig {
  /// The MLP activation: quick_gelu is x * sigmoid(1.702 x) (SD 1.x), gelu the exact erf GELU (SD 2.x).
  enum class Activation { kQuickGELU, kGELU };

  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  Activation hidden_act = Activation::kQuickGELU;
  double layer_norm_eps = 1e-5;
  /// Decides how pooler_output finds the end-of-text token: 2 (legacy configs) means argmax(ids).
  int64_t eos_token_id = 49407;
  /// CLIPTextModelWithProjection's text_projection width (SDXL's text_encoder_2: 1280).
  int64_t projection_dim = 512;

  /// Parses a text encoder config. Throws dpinfer::Error naming the field at fault.
  static CLIPTextConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static CLIPTextConfig from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

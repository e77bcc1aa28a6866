#pragma once
// transformers' T5Config as T5EncoderModel reads it: text_encoder_2/config.json of FLUX.1,
// text_encoder_3/ of SD3, text_encoder/ of Chroma.

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// transformers' T5Config (models/t5/configuration_t5.py), the encoder's fields.
struct T5Config {
  /// The feed-forward activation (transformers' ACT2FN[dense_act_fn]).
  enum class Activation {
    kReLU,     ///< "relu" (T5 v1.0)
    kGELUNew,  ///< "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), T5 v1.1's gated-gelu
    kGELU,     ///< "gelu": the exact erf GELU
    kSiLU,     ///< "silu" / "swish"
  };

  int64_t vocab_size = 32128;
  int64_t d_model = 512;
  int64_t d_kv = 64;
  int64_t d_ff = 2048;
  int64_t num_layers = 6;
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  /// feed_forward_proj "gated-<act>": DenseReluDense is wi_0, wi_1, wo (act(wi_0 x) * wi_1 x);
  /// "<act>": wi, wo.
  bool is_gated_act = false;
  Activation dense_act_fn = Activation::kReLU;

  /// heads * d_kv: the width of q, k, v and o's input (need not be d_model).
  int64_t inner_dim() const { return num_heads * d_kv; }

  /// Parses a T5 config. As T5Config.__init__: feed_forward_proj ("relu", "gated-gelu", ...)
  /// gives is_gated_act and dense_act_fn ("gated-gelu" means gelu_new), and explicit
  /// is_gated_act / dense_act_fn keys, which config.json files carry, override them (they
  /// reach PretrainedConfig as attributes). Throws dpinfer::Error naming the field at fault.
  static T5Config from_json(const nlohmann::json& json);
  /// Reads and parses `path` (a config.json). Throws dpinfer::Error naming the file.
  static T5Config from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

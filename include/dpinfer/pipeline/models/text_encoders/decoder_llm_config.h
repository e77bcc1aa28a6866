#pragma once
// The decoder LLMs used as text encoders (Qwen-Image's Qwen2.5-VL, Z-Image's and FLUX.2 [klein]'s
// Qwen3, FLUX.2 [dev]'s Mistral 3): one config for all, resolved from text_encoder/config.json by the
// class that wrote it.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// A Llama-style decoder (pre-norm RMSNorm blocks, GQA, rotary positions, SwiGLU MLP) and
/// the options in which transformers' Qwen2.5-VL text model, Qwen3 and Mistral differ.
struct DecoderLLMConfig {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 22016;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  /// Grouped-query attention: each key/value head serves num_attention_heads / num_key_value_heads query heads.
  int64_t num_key_value_heads = 32;
  /// Per head. Qwen3 reads it from the config (4B: 128, while hidden_size / heads = 80);
  /// Qwen2.5-VL always uses hidden_size / num_attention_heads.
  int64_t head_dim = 128;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 32768;

  /// Bias on q_proj, k_proj, v_proj (Qwen2.5-VL: always; Qwen3: attention_bias).
  bool qkv_bias = false;
  /// Bias on o_proj (Qwen2.5-VL: never; Qwen3: attention_bias).
  bool o_bias = false;
  /// Per-head RMSNorm q_norm / k_norm [head_dim] on the queries and keys before RoPE (Qwen3).
  bool qk_norm = false;
  /// Rotary positions from the attention mask, cumsum(mask) - 1 with padding at 1
  /// (Qwen2.5-VL's get_rope_index for text), instead of 0..L-1 whatever the mask (Qwen3).
  /// The two agree for right padding; they differ at left-padded sequences.
  bool positions_from_mask = false;
  /// Qwen2.5-VL's multimodal RoPE sections (temporal, height, width), summing to head_dim / 2.
  /// For text the three position ids are equal, so M-RoPE is 1D RoPE; a prompt with images
  /// (DecoderLLMTextEncoder::hidden_state_with_images) rotates each section by its own position.
  std::vector<int64_t> mrope_section;
  /// Qwen2.5-VL's image tokens and vision settings, for prompts that hold images (Qwen-Image-Edit):
  /// Qwen2_5_VLConfig's top-level token ids and its vision_config's spatial_merge_size and
  /// tokens_per_second, with its defaults. The other models leave them at these defaults, unused.
  int64_t image_token_id = 151655;         ///< <|image_pad|>
  int64_t video_token_id = 151656;         ///< <|video_pad|> (refused after <|vision_start|>)
  int64_t vision_start_token_id = 151652;  ///< <|vision_start|>
  /// The vision tower merges spatial_merge_size x spatial_merge_size patches into one image token.
  int64_t spatial_merge_size = 2;
  /// Temporal positions per second of video; an image's temporal positions are 0 whatever it is.
  double tokens_per_second = 4.0;
  /// Mistral's sliding_window: a query sees the keys at most this far behind it (transformers'
  /// create_sliding_window_causal_mask). 0 for none. Within the window the mask is the causal one,
  /// so the encoder refuses longer texts rather than build another mask.
  int64_t sliding_window = 0;
  /// The state_dict prefix of the text model's parameters: "model" in a saved
  /// Qwen2_5_VLForConditionalGeneration ("model.layers.0..."), empty for Qwen3Model,
  /// "language_model.model" in a Mistral3ForConditionalGeneration.
  std::string prefix;

  /// transformers' Qwen2_5_VLConfig as Qwen2_5_VLForConditionalGeneration reads it: the
  /// text fields from "text_config" when that is an object, else from the top level (the
  /// layout of checkpoints saved by older transformers); the image token ids and vision_config
  /// from the top level in both layouts. Throws dpinfer::Error naming the field at fault.
  static DecoderLLMConfig qwen2_5_vl_from_json(const nlohmann::json& json);
  /// transformers' Qwen3Config (Qwen3Model). Throws dpinfer::Error naming the field at fault.
  static DecoderLLMConfig qwen3_from_json(const nlohmann::json& json);
  /// transformers' Mistral3Config as Mistral3ForConditionalGeneration reads it: its text_config (a
  /// MistralConfig; the vision tower is not read). Throws dpinfer::Error naming the field at fault.
  static DecoderLLMConfig mistral3_from_json(const nlohmann::json& json);
  /// Reads `path` (a config.json) and parses it with qwen2_5_vl_from_json or qwen3_from_json.
  /// Throws dpinfer::Error naming the file.
  static DecoderLLMConfig qwen2_5_vl_from_file(const std::string& path);
  static DecoderLLMConfig qwen3_from_file(const std::string& path);
};

}  // namespace dpinfer::pipeline

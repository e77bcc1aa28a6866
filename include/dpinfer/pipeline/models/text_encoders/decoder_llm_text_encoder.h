#pragma once
// A decoder LLM used as a text encoder: transformers' Qwen2.5-VL text model (Qwen-Image's
// Qwen2_5_VLForConditionalGeneration without its vision tower and lm_head) and Qwen3Model
// (Z-Image), one module whose DecoderLLMConfig carries their differences.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/text_encoders/decoder_llm_config.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// transformers' Qwen2_5_VLAttention / Qwen3Attention (text only): q/k/v/o_proj, optional
/// per-head q_norm/k_norm, rotary positions, causal grouped-query attention with a padding mask.
class DecoderLLMAttentionImpl : public torch::nn::Module {
 public:
  DecoderLLMAttentionImpl(const DecoderLLMConfig& config, const at::TensorOptions& options);
  /// x [B, L, hidden_size]; cos, sin [B or 1, L, head_dim] in x's dtype; key_padding_mask
  /// [B, L] (nonzero = token) or undefined. Returns [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& key_padding_mask);

 private:
  int64_t heads_, kv_heads_, head_dim_;
  nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  nn::LlamaRMSNorm q_norm_{nullptr}, k_norm_{nullptr};
};
TORCH_MODULE(DecoderLLMAttention);

/// transformers' Qwen2MLP / Qwen3MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
class DecoderLLMMLPImpl : public torch::nn::Module {
 public:
  DecoderLLMMLPImpl(const DecoderLLMConfig& config, const at::TensorOptions& options);
  /// [B, L, hidden_size] to [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x);

 private:
  nn::Linear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};
TORCH_MODULE(DecoderLLMMLP);

/// transformers' Qwen2_5_VLDecoderLayer / Qwen3DecoderLayer:
/// x += self_attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x)).
class DecoderLLMLayerImpl : public torch::nn::Module {
 public:
  DecoderLLMLayerImpl(const DecoderLLMConfig& config, const at::TensorOptions& options);
  /// As DecoderLLMAttention::forward, [B, L, hidden_size] to [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& key_padding_mask);

 private:
  DecoderLLMAttention self_attn_{nullptr};
  DecoderLLMMLP mlp_{nullptr};
  nn::LlamaRMSNorm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr};
};
TORCH_MODULE(DecoderLLMLayer);

/// The text model. Parameters are named as in the saved checkpoints: "<prefix>.embed_tokens",
/// "<prefix>.layers.N.*", "<prefix>.norm", with prefix "model" for Qwen2_5_VLForConditionalGeneration
/// and none for Qwen3Model. The rotary inv_freq buffers are not parameters (transformers does
/// not save them either): they are computed per forward, in fp32, as transformers does.
/// --offload blocks keeps its layers in host memory between uses (nn/offload.h).
class DecoderLLMTextEncoderImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  explicit DecoderLLMTextEncoderImpl(const DecoderLLMConfig& config,
                                     const at::TensorOptions& options = nn::default_options());

  /// transformers' hidden_states[index] of a forward with output_hidden_states=True, computing
  /// only what it needs. index counts as Python does over the num_hidden_layers + 1 states:
  /// 0 the embeddings, k the output of layer k (no norm), and -1 the output of the last layer
  /// after the final norm (transformers puts the normed state there, for Qwen2.5-VL by hand and
  /// for Qwen3 through check_model_inputs). So -1 is Qwen-Image's prompt embedding, and -2, the
  /// un-normed output of layer L-1, Z-Image's; -2 runs L-1 layers, not L.
  /// input_ids [B, L] integer; attention_mask [B, L] (bool or integer, nonzero = token; left or
  /// right padding) or undefined for none. Returns [B, L, hidden_size] in the module's dtype;
  /// rows at padding positions hold whatever transformers computes there.
  at::Tensor hidden_state(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t index = -1);

  /// hidden_state() at each of `indices` (counted as there), from one forward that runs the layers the
  /// deepest of them needs: FLUX.2 [klein]'s hidden_states (9, 18, 27). The same values, in `indices`' order.
  std::vector<at::Tensor> hidden_states(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                        const std::vector<int64_t>& indices);

  /// hidden_state() of a Qwen2.5-VL prompt that holds images (Qwen-Image-Edit), as transformers'
  /// Qwen2_5_VLModel.forward runs it with pixel_values: the ids' embeddings with image_embeds' rows
  /// written, in order, over the config's image_token_id tokens (masked_scatter, every such token of the
  /// batch, padding included), 3D positions from qwen2_5_vl_rope_index() and multimodal RoPE (each of the
  /// mrope_section's temporal, height and width channel groups rotated by its own position).
  /// image_embeds [N, hidden_size] floating (undefined for none): the vision tower's output, N the number
  /// of image tokens in input_ids, cast to the module's dtype; image_grid_thw the {t, h, w} of each image
  /// (h, w multiples of spatial_merge_size), in the order the images appear row after row, their
  /// t * h * w / merge^2 adding up to N. With no image tokens and no grids it equals hidden_state().
  /// Throws dpinfer::Error when the counts differ (as transformers raises), on a bad grid, on
  /// qwen2_5_vl_rope_index()'s errors and on hidden_state()'s.
  at::Tensor hidden_state_with_images(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                      const at::Tensor& image_embeds,
                                      const std::vector<std::array<int64_t, 3>>& image_grid_thw, int64_t index = -1);

  /// hidden_state_with_images() at each of `indices`, from one forward, as hidden_states().
  std::vector<at::Tensor> hidden_states_with_images(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                                    const at::Tensor& image_embeds,
                                                    const std::vector<std::array<int64_t, 3>>& image_grid_thw,
                                                    const std::vector<int64_t>& indices);

  const DecoderLLMConfig& config() const { return config_; }
  std::vector<std::string> block_lists() const override {
    return {config_.prefix.empty() ? "layers" : config_.prefix + ".layers"};
  }

 private:
  /// cos, sin [B or 1, L, head_dim] in `dtype`, for the positions of `attention_mask`'s rows.
  std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& attention_mask, int64_t length, at::ScalarType dtype,
                                           const at::Device& device) const;
  /// cos, sin [B, L, head_dim] in `dtype` for 3D positions [3, B, L]: multimodal RoPE's channels taken from
  /// the temporal, height or width position by mrope_section.
  std::pair<at::Tensor, at::Tensor> multimodal_rotary(const at::Tensor& position_ids, at::ScalarType dtype,
                                                      const at::Device& device) const;
  /// inv_freq [head_dim / 2] on `device`, as transformers' buffer holds it.
  at::Tensor inv_freq(const at::Device& device) const;
  /// Checks input_ids, attention_mask and indices as hidden_states() does; returns the ids as int64 and
  /// the number of layers each index runs.
  std::pair<at::Tensor, std::vector<int64_t>> check_inputs(const at::Tensor& input_ids,
                                                           const at::Tensor& attention_mask,
                                                           const std::vector<int64_t>& indices) const;
  /// The layers from the embeddings `h` [B, L, hidden_size]: the states after runs[i] layers (the last
  /// normed), with 3D positions [3, B, L] when `position_ids` is defined, else the text positions.
  std::vector<at::Tensor> run_layers(at::Tensor h, const at::Tensor& attention_mask, const at::Tensor& position_ids,
                                     const std::vector<int64_t>& runs);

  DecoderLLMConfig config_;
  nn::Embedding embed_tokens_{nullptr};
  std::vector<DecoderLLMLayer> layers_;
  nn::LlamaRMSNorm norm_{nullptr};
};
TORCH_MODULE(DecoderLLMTextEncoder);

}  // namespace dpinfer::pipeline

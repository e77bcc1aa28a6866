#pragma once
// A decoder LLM used as a text encoder: transformers' Qwen2.5-VL text model (Qwen-Image's
// Qwen2_5_VLForConditionalGeneration without its vision tower and lm_head) and Qwen3Model
// (Z-Image), one module whose DecoderLLMConfig carries their differences.

#include <cstdint>
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

  const DecoderLLMConfig& config() const { return config_; }
  std::vector<std::string> block_lists() const override {
    return {config_.prefix.empty() ? "layers" : config_.prefix + ".layers"};
  }

 private:
  /// cos, sin [B or 1, L, head_dim] in `dtype`, for the positions of `attention_mask`'s rows.
  std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& attention_mask, int64_t length, at::ScalarType dtype,
                                           const at::Device& device) const;

  DecoderLLMConfig config_;
  nn::Embedding embed_tokens_{nullptr};
  std::vector<DecoderLLMLayer> layers_;
  nn::LlamaRMSNorm norm_{nullptr};
};
TORCH_MODULE(DecoderLLMTextEncoder);

}  // namespace dpinfer::pipeline

#pragma once
// The CLIP text encoder of Stable Diffusion, built from text_encoder/config.json.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/model_configs.h"

namespace dpinfer::pipeline {

/// What CLIPTextModel::forward returns.
struct CLIPTextModelOutput {
  /// [B, L, hidden_size]: the last layer's output after final_layer_norm (SD's prompt embeddings).
  at::Tensor last_hidden_state;
  /// [B, hidden_size]: last_hidden_state at each sequence's end-of-text token.
  at::Tensor pooler_output;
  /// With output_hidden_states: num_hidden_layers + 1 tensors [B, L, hidden_size], the
  /// embeddings first, then each layer's output (none passes through final_layer_norm).
  std::vector<at::Tensor> hidden_states;
};

/// transformers' CLIPAttention: q/k/v/out_proj with bias, causal multi-head attention.
class CLIPAttentionImpl : public torch::nn::Module {
 public:
  explicit CLIPAttentionImpl(const CLIPTextConfig& config);
  /// [B, L, D] to [B, L, D]; each position attends to itself and earlier ones.
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t heads_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, out_proj_{nullptr};
};
TORCH_MODULE(CLIPAttention);

/// transformers' CLIPMLP: fc1, quick_gelu or gelu, fc2.
class CLIPMLPImpl : public torch::nn::Module {
 public:
  explicit CLIPMLPImpl(const CLIPTextConfig& config);
  /// [B, L, hidden_size] to [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x);

 private:
  CLIPTextConfig::Activation activation_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(CLIPMLP);

/// transformers' CLIPEncoderLayer: x += self_attn(layer_norm1(x)); x += mlp(layer_norm2(x)).
class CLIPEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit CLIPEncoderLayerImpl(const CLIPTextConfig& config);
  /// [B, L, hidden_size] to [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x);

 private:
  CLIPAttention self_attn_{nullptr};
  CLIPMLP mlp_{nullptr};
  torch::nn::LayerNorm layer_norm1_{nullptr}, layer_norm2_{nullptr};
};
TORCH_MODULE(CLIPEncoderLayer);

/// transformers' CLIPTextModel. Parameters are named as in its state_dict:
/// text_model.embeddings.{token,position}_embedding, text_model.encoder.layers.N.*,
/// text_model.final_layer_norm. position_ids is not a buffer here: positions are 0..L-1.
/// SD passes no padding mask, so only the causal mask applies.
class CLIPTextModelImpl : public torch::nn::Module {
 public:
  explicit CLIPTextModelImpl(const CLIPTextConfig& config);

  /// input_ids [B, L] (integer, L <= max_position_embeddings) to the encoder outputs.
  CLIPTextModelOutput forward(const at::Tensor& input_ids, bool output_hidden_states = false);

  /// StableDiffusionPipeline.encode_prompt's embeddings: with clip_skip 0 the
  /// last_hidden_state, else hidden_states[-(clip_skip + 1)] through final_layer_norm,
  /// running only the layers needed. clip_skip must be in [0, num_hidden_layers].
  at::Tensor encode(const at::Tensor& input_ids, int64_t clip_skip = 0);

  const CLIPTextConfig& config() const { return config_; }

 private:
  at::Tensor embed(const at::Tensor& input_ids);

  CLIPTextConfig config_;
  torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  std::vector<CLIPEncoderLayer> layers_;
  torch::nn::LayerNorm final_layer_norm_{nullptr};
};
TORCH_MODULE(CLIPTextModel);

}  // namespace dpinfer::pipeline

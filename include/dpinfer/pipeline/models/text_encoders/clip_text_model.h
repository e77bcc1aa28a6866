#pragma once
// The CLIP text encoders of Stable Diffusion and SDXL, built from text_encoder/config.json.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/text_encoders/clip_text_config.h"
#include "dpinfer/pipeline/nn/layers.h"

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
  CLIPAttentionImpl(const CLIPTextConfig& config, const at::TensorOptions& options);
  /// [B, L, D] to [B, L, D]; each position attends to itself and earlier ones.
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t heads_;
  nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, out_proj_{nullptr};
};
TORCH_MODULE(CLIPAttention);

/// transformers' CLIPMLP: fc1, quick_gelu or gelu, fc2.
class CLIPMLPImpl : public torch::nn::Module {
 public:
  CLIPMLPImpl(const CLIPTextConfig& config, const at::TensorOptions& options);
  /// [B, L, hidden_size] to [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x);

 private:
  CLIPTextConfig::Activation activation_;
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(CLIPMLP);

/// transformers' CLIPEncoderLayer: x += self_attn(layer_norm1(x)); x += mlp(layer_norm2(x)).
class CLIPEncoderLayerImpl : public torch::nn::Module {
 public:
  CLIPEncoderLayerImpl(const CLIPTextConfig& config, const at::TensorOptions& options);
  /// [B, L, hidden_size] to [B, L, hidden_size].
  at::Tensor forward(const at::Tensor& x);

 private:
  CLIPAttention self_attn_{nullptr};
  CLIPMLP mlp_{nullptr};
  nn::LayerNorm layer_norm1_{nullptr}, layer_norm2_{nullptr};
};
TORCH_MODULE(CLIPEncoderLayer);

/// transformers' CLIPTextModel. Parameters are named as in its state_dict:
/// text_model.embeddings.{token,position}_embedding, text_model.encoder.layers.N.*,
/// text_model.final_layer_norm. position_ids is not a buffer here: positions are 0..L-1.
/// SD and SDXL pass no padding mask, so only the causal mask applies.
class CLIPTextModelImpl : public torch::nn::Module {
 public:
  explicit CLIPTextModelImpl(const CLIPTextConfig& config, const at::TensorOptions& options = nn::default_options());

  /// input_ids [B, L] (integer, L <= max_position_embeddings) to the encoder outputs.
  CLIPTextModelOutput forward(const at::Tensor& input_ids, bool output_hidden_states = false);

  /// StableDiffusionPipeline.encode_prompt's embeddings: with clip_skip 0 the
  /// last_hidden_state, else hidden_states[-(clip_skip + 1)] through final_layer_norm,
  /// running only the layers needed. clip_skip must be in [0, num_hidden_layers].
  at::Tensor encode(const at::Tensor& input_ids, int64_t clip_skip = 0);

  /// StableDiffusionXLPipeline.encode_prompt's per-token embeddings: hidden_states[-(skip + 2)],
  /// the output of the first num_hidden_layers - 1 - skip layers, without final_layer_norm
  /// (skip 0 is the penultimate layer). skip must be in [0, num_hidden_layers - 1].
  at::Tensor penultimate_hidden_state(const at::Tensor& input_ids, int64_t skip = 0);

  const CLIPTextConfig& config() const { return config_; }

 protected:
  /// The pooled output of a last_hidden_state [B, L, D]: the row of each sequence's end-of-text token.
  at::Tensor pool(const at::Tensor& last_hidden_state, const at::Tensor& input_ids) const;

 private:
  at::Tensor embed(const at::Tensor& input_ids);

  CLIPTextConfig config_;
  nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  std::vector<CLIPEncoderLayer> layers_;
  nn::LayerNorm final_layer_norm_{nullptr};
};
TORCH_MODULE(CLIPTextModel);

/// transformers' CLIPTextModelWithProjection (SDXL's text_encoder_2): a CLIPTextModel plus
/// text_projection, a bias-free Linear [projection_dim, hidden_size] on the pooled output.
class CLIPTextModelWithProjectionImpl : public CLIPTextModelImpl {
 public:
  explicit CLIPTextModelWithProjectionImpl(const CLIPTextConfig& config,
                                           const at::TensorOptions& options = nn::default_options());

  /// What SDXL takes from text_encoder_2 in one run of its layers.
  struct Encoding {
    at::Tensor hidden;       ///< [B, L, hidden_size]: penultimate_hidden_state(ids, skip)
    at::Tensor text_embeds;  ///< [B, projection_dim]: text_projection(pooler_output)
  };
  Encoding encode_for_sdxl(const at::Tensor& input_ids, int64_t skip = 0);

  /// text_projection(pooler_output) [B, projection_dim].
  at::Tensor text_embeds(const at::Tensor& input_ids);

 private:
  nn::Linear text_projection_{nullptr};
};
TORCH_MODULE(CLIPTextModelWithProjection);

}  // namespace dpinfer::pipeline

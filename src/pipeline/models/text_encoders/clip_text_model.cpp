#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"

#include <torch/nn/modules/container/modulelist.h>

#include <memory>
#include <string>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

nn::LayerNorm layer_norm(const CLIPTextConfig& config, const at::TensorOptions& options) {
  return nn::LayerNorm(config.hidden_size, config.layer_norm_eps, true, options);
}

}  // namespace

// Ref: transformers/models/clip/modeling_clip.py CLIPAttention
CLIPAttentionImpl::CLIPAttentionImpl(const CLIPTextConfig& config, const at::TensorOptions& options)
    : heads_(config.num_attention_heads) {
  const int64_t d = config.hidden_size;
  k_proj_ = register_module("k_proj", nn::Linear(d, d, true, options));
  v_proj_ = register_module("v_proj", nn::Linear(d, d, true, options));
  q_proj_ = register_module("q_proj", nn::Linear(d, d, true, options));
  out_proj_ = register_module("out_proj", nn::Linear(d, d, true, options));
}

at::Tensor CLIPAttentionImpl::forward(const at::Tensor& x) {
  const int64_t batch = x.size(0), length = x.size(1), dim = x.size(2);
  auto split_heads = [&](const at::Tensor& t) { return t.view({batch, length, heads_, -1}).transpose(1, 2); };
  at::Tensor out = at::scaled_dot_product_attention(split_heads(q_proj_(x)), split_heads(k_proj_(x)),
                                                    split_heads(v_proj_(x)), /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                    /*is_causal=*/true);  // [B, heads, L, head_dim]
  return out_proj_(out.transpose(1, 2).reshape({batch, length, dim}));
}

// Ref: transformers/models/clip/modeling_clip.py CLIPMLP; activations.py QuickGELUActivation
CLIPMLPImpl::CLIPMLPImpl(const CLIPTextConfig& config, const at::TensorOptions& options)
    : activation_(config.hidden_act) {
  fc1_ = register_module("fc1", nn::Linear(config.hidden_size, config.intermediate_size, true, options));
  fc2_ = register_module("fc2", nn::Linear(config.intermediate_size, config.hidden_size, true, options));
}

at::Tensor CLIPMLPImpl::forward(const at::Tensor& x) {
  at::Tensor h = fc1_(x);
  h = activation_ == CLIPTextConfig::Activation::kQuickGELU ? h * at::sigmoid(1.702 * h) : at::gelu(h);
  return fc2_(h);
}

// Ref: transformers/models/clip/modeling_clip.py CLIPEncoderLayer
CLIPEncoderLayerImpl::CLIPEncoderLayerImpl(const CLIPTextConfig& config, const at::TensorOptions& options) {
  self_attn_ = register_module("self_attn", CLIPAttention(config, options));
  layer_norm1_ = register_module("layer_norm1", layer_norm(config, options));
  mlp_ = register_module("mlp", CLIPMLP(config, options));
  layer_norm2_ = register_module("layer_norm2", layer_norm(config, options));
}

at::Tensor CLIPEncoderLayerImpl::forward(const at::Tensor& x) {
  at::Tensor h = x + self_attn_(layer_norm1_(x));
  return h + mlp_(layer_norm2_(h));
}

// Ref: transformers/models/clip/modeling_clip.py CLIPTextModel, CLIPTextTransformer, CLIPTextEmbeddings
CLIPTextModelImpl::CLIPTextModelImpl(const CLIPTextConfig& config, const at::TensorOptions& options)
    : config_(config) {
  // text_model, embeddings and encoder only group parameters, as the transformers modules do.
  auto text_model = register_module("text_model", std::make_shared<torch::nn::Module>());
  auto embeddings = text_model->register_module("embeddings", std::make_shared<torch::nn::Module>());
  auto encoder = text_model->register_module("encoder", std::make_shared<torch::nn::Module>());
  token_embedding_ =
      embeddings->register_module("token_embedding", nn::Embedding(config.vocab_size, config.hidden_size, options));
  position_embedding_ = embeddings->register_module(
      "position_embedding", nn::Embedding(config.max_position_embeddings, config.hidden_size, options));
  auto layers = encoder->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    layers_.push_back(CLIPEncoderLayer(config, options));
    layers->push_back(layers_.back());
  }
  final_layer_norm_ = text_model->register_module("final_layer_norm", layer_norm(config, options));
}

at::Tensor CLIPTextModelImpl::embed(const at::Tensor& input_ids) {
  if (input_ids.dim() != 2 || !at::isIntegralType(input_ids.scalar_type(), /*includeBool=*/false))
    throw Error("text encoder: input_ids must be an integer tensor [batch, length], got " +
                std::string(input_ids.dtype().name()) + " " + c10::str(input_ids.sizes()));
  const int64_t length = input_ids.size(1);
  if (length > config_.max_position_embeddings)
    throw Error("text encoder: sequence length " + std::to_string(length) + " exceeds max_position_embeddings " +
                std::to_string(config_.max_position_embeddings) + "; truncate the tokens");
  at::Tensor positions = at::arange(length, input_ids.options().dtype(at::kLong)).unsqueeze(0);  // [1, L]
  return token_embedding_(input_ids.to(at::kLong)) + position_embedding_(positions);  // [B, L, D]
}

CLIPTextModelOutput CLIPTextModelImpl::forward(const at::Tensor& input_ids, bool output_hidden_states) {
  CLIPTextModelOutput out;
  at::Tensor h = embed(input_ids);
  if (output_hidden_states) out.hidden_states.push_back(h);
  for (auto& layer : layers_) {
    h = layer(h);
    if (output_hidden_states) out.hidden_states.push_back(h);
  }
  out.last_hidden_state = final_layer_norm_(h);
  out.pooler_output = pool(out.last_hidden_state, input_ids);  // [B, D]
  return out;
}

at::Tensor CLIPTextModelImpl::pool(const at::Tensor& last_hidden_state, const at::Tensor& input_ids) const {
  // eos_token_id 2 marks configs from before transformers PR #24773: the end token is the largest id.
  at::Tensor ids = input_ids.to(at::kLong);
  at::Tensor eos_index =
      config_.eos_token_id == 2 ? ids.argmax(-1) : ids.eq(config_.eos_token_id).to(at::kInt).argmax(-1);
  at::Tensor rows = at::arange(ids.size(0), ids.options());
  return last_hidden_state.index({rows, eos_index});  // [B, D]
}

at::Tensor CLIPTextModelImpl::encode(const at::Tensor& input_ids, int64_t clip_skip) {
  if (clip_skip < 0 || clip_skip > config_.num_hidden_layers)
    throw Error("text encoder: clip_skip " + std::to_string(clip_skip) + " is out of range; expected 0 to " +
                std::to_string(config_.num_hidden_layers) + " (num_hidden_layers)");
  // hidden_states[-(clip_skip + 1)] is the output of the first num_hidden_layers - clip_skip layers.
  at::Tensor h = embed(input_ids);
  for (int64_t i = 0; i < config_.num_hidden_layers - clip_skip; ++i) h = layers_[i](h);
  return final_layer_norm_(h);
}

// Ref: diffusers/pipelines/stable_diffusion_xl/pipeline_stable_diffusion_xl.py encode_prompt
at::Tensor CLIPTextModelImpl::penultimate_hidden_state(const at::Tensor& input_ids, int64_t skip) {
  if (skip < 0 || skip > config_.num_hidden_layers - 1)
    throw Error("text encoder: clip_skip " + std::to_string(skip) + " is out of range; expected 0 to " +
                std::to_string(config_.num_hidden_layers - 1) + " (num_hidden_layers - 1)");
  at::Tensor h = embed(input_ids);
  for (int64_t i = 0; i < config_.num_hidden_layers - 1 - skip; ++i) h = layers_[i](h);
  return h;
}

// Ref: transformers/models/clip/modeling_clip.py CLIPTextModelWithProjection
CLIPTextModelWithProjectionImpl::CLIPTextModelWithProjectionImpl(const CLIPTextConfig& config,
                                                                 const at::TensorOptions& options)
    : CLIPTextModelImpl(config, options) {
  text_projection_ =
      register_module("text_projection", nn::Linear(config.hidden_size, config.projection_dim, false, options));
}

CLIPTextModelWithProjectionImpl::Encoding CLIPTextModelWithProjectionImpl::encode_for_sdxl(
    const at::Tensor& input_ids, int64_t skip) {
  if (skip < 0 || skip > config().num_hidden_layers - 1)
    throw Error("text encoder: clip_skip " + std::to_string(skip) + " is out of range; expected 0 to " +
                std::to_string(config().num_hidden_layers - 1) + " (num_hidden_layers - 1)");
  CLIPTextModelOutput out = forward(input_ids, /*output_hidden_states=*/true);
  Encoding e;
  e.hidden = out.hidden_states[out.hidden_states.size() - 2 - static_cast<size_t>(skip)];
  e.text_embeds = text_projection_(out.pooler_output);
  return e;
}

at::Tensor CLIPTextModelWithProjectionImpl::text_embeds(const at::Tensor& input_ids) {
  return text_projection_(forward(input_ids).pooler_output);
}

}  // namespace dpinfer::pipeline

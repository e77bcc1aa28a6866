#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"

#include <torch/nn/modules/container/modulelist.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/models/text_encoders/qwen2_5_vl_rope_index.h"
#include "dpinfer/pipeline/nn/attention.h"
#include "dpinfer/pipeline/nn/rope.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

nn::LlamaRMSNorm rms_norm(int64_t dim, const DecoderLLMConfig& config, const at::TensorOptions& options) {
  return nn::LlamaRMSNorm(dim, config.rms_norm_eps, options);
}

// Ref: modeling_qwen3.py apply_rotary_pos_emb. x [B, H, L, D]; cos, sin [B or 1, 1, L, D].
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + nn::rotate_half(x) * sin;
}

}  // namespace

// Ref: transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py Qwen2_5_VLAttention;
// transformers/models/qwen3/modeling_qwen3.py Qwen3Attention
DecoderLLMAttentionImpl::DecoderLLMAttentionImpl(const DecoderLLMConfig& config, const at::TensorOptions& options)
    : heads_(config.num_attention_heads), kv_heads_(config.num_key_value_heads), head_dim_(config.head_dim) {
  const int64_t d = config.hidden_size;
  q_proj_ = register_module("q_proj", nn::Linear(d, heads_ * head_dim_, config.qkv_bias, options));
  k_proj_ = register_module("k_proj", nn::Linear(d, kv_heads_ * head_dim_, config.qkv_bias, options));
  v_proj_ = register_module("v_proj", nn::Linear(d, kv_heads_ * head_dim_, config.qkv_bias, options));
  o_proj_ = register_module("o_proj", nn::Linear(heads_ * head_dim_, d, config.o_bias, options));
  if (config.qk_norm) {
    // Over each head's head_dim channels, before RoPE (Qwen3: "unlike olmo, only on the head dim").
    q_norm_ = register_module("q_norm", rms_norm(head_dim_, config, options));
    k_norm_ = register_module("k_norm", rms_norm(head_dim_, config, options));
  }
}

at::Tensor DecoderLLMAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                            const at::Tensor& key_padding_mask) {
  const int64_t batch = x.size(0), length = x.size(1);
  at::Tensor q = q_proj_(x).view({batch, length, heads_, head_dim_});     // [B, L, H, D]
  at::Tensor k = k_proj_(x).view({batch, length, kv_heads_, head_dim_});  // [B, L, H_kv, D]
  at::Tensor v = v_proj_(x).view({batch, length, kv_heads_, head_dim_});
  if (!q_norm_.is_empty()) {
    q = q_norm_(q);
    k = k_norm_(k);
  }
  const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [B or 1, 1, L, D]
  q = apply_rotary(q.transpose(1, 2), c, s);                    // [B, H, L, D]
  k = apply_rotary(k.transpose(1, 2), c, s);                    // [B, H_kv, L, D]
  // scaling = head_dim**-0.5, as transformers passes it to SDPA.
  at::Tensor out = nn::causal_attention(q, k, v.transpose(1, 2), key_padding_mask,
                                        std::pow(static_cast<double>(head_dim_), -0.5));  // [B, H, L, D]
  return o_proj_(out.transpose(1, 2).reshape({batch, length, heads_ * head_dim_}));
}

// Ref: modeling_qwen2_5_vl.py Qwen2MLP; modeling_qwen3.py Qwen3MLP (hidden_act "silu")
DecoderLLMMLPImpl::DecoderLLMMLPImpl(const DecoderLLMConfig& config, const at::TensorOptions& options) {
  gate_proj_ = register_module("gate_proj", nn::Linear(config.hidden_size, config.intermediate_size, false, options));
  up_proj_ = register_module("up_proj", nn::Linear(config.hidden_size, config.intermediate_size, false, options));
  down_proj_ = register_module("down_proj", nn::Linear(config.intermediate_size, config.hidden_size, false, options));
}

at::Tensor DecoderLLMMLPImpl::forward(const at::Tensor& x) { return down_proj_(at::silu(gate_proj_(x)) * up_proj_(x)); }

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLDecoderLayer; modeling_qwen3.py Qwen3DecoderLayer
DecoderLLMLayerImpl::DecoderLLMLayerImpl(const DecoderLLMConfig& config, const at::TensorOptions& options) {
  self_attn_ = register_module("self_attn", DecoderLLMAttention(config, options));
  mlp_ = register_module("mlp", DecoderLLMMLP(config, options));
  input_layernorm_ = register_module("input_layernorm", rms_norm(config.hidden_size, config, options));
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", rms_norm(config.hidden_size, config, options));
}

at::Tensor DecoderLLMLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                        const at::Tensor& key_padding_mask) {
  at::Tensor h = x + self_attn_(input_layernorm_(x), cos, sin, key_padding_mask);
  return h + mlp_(post_attention_layernorm_(h));
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLTextModel (under Qwen2_5_VLForConditionalGeneration, saved as
// "model.*": its _checkpoint_conversion_mapping maps model.language_model back to model on save);
// modeling_qwen3.py Qwen3Model
DecoderLLMTextEncoderImpl::DecoderLLMTextEncoderImpl(const DecoderLLMConfig& config, const at::TensorOptions& options)
    : config_(config) {
  // The prefix ("model", "language_model.model") only groups the parameters, as the checkpoints name them:
  // one empty module per dotted part.
  torch::nn::Module* root = this;
  for (size_t begin = 0; begin < config.prefix.size();) {
    const size_t dot = std::min(config.prefix.find('.', begin), config.prefix.size());
    root = root->register_module(config.prefix.substr(begin, dot - begin), std::make_shared<torch::nn::Module>()).get();
    begin = dot + 1;
  }
  embed_tokens_ = root->register_module("embed_tokens", nn::Embedding(config.vocab_size, config.hidden_size, options));
  auto layers = root->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    layers_.push_back(DecoderLLMLayer(config, options));
    layers->push_back(layers_.back());
  }
  norm_ = root->register_module("norm", rms_norm(config.hidden_size, config, options));
}

at::Tensor DecoderLLMTextEncoderImpl::inv_freq(const at::Device& device) const {
  // inv_freq is built on the CPU in fp32 and then moved, as the buffer is: 1 / theta^(2i / d).
  const int64_t dim = config_.head_dim;
  at::Tensor exponent = at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / dim;
  return at::reciprocal(at::pow(config_.rope_theta, exponent)).to(device);  // [D/2]
}

// Ref: modeling_qwen3.py Qwen3RotaryEmbedding; modeling_rope_utils.py _compute_default_rope_parameters;
// modeling_qwen2_5_vl.py Qwen2_5_VLModel.get_rope_index (text only), Qwen2_5_VLRotaryEmbedding,
// apply_multimodal_rotary_pos_emb. For text the temporal, height and width position ids are the same
// row, so the mrope_section split-and-concatenate picks every slice from identical cos/sin: 1D RoPE
// (make_llm_text_encoder_goldens.py asserts this bit for bit).
std::pair<at::Tensor, at::Tensor> DecoderLLMTextEncoderImpl::rotary(const at::Tensor& attention_mask, int64_t length,
                                                                    at::ScalarType dtype,
                                                                    const at::Device& device) const {
  at::Tensor freq = inv_freq(device);  // [D/2]
  at::Tensor positions;                // [B or 1, L]
  if (config_.positions_from_mask && attention_mask.defined()) {
    at::Tensor m = attention_mask.to(at::kLong);
    positions = m.cumsum(-1) - 1;
    positions.masked_fill_(m == 0, 1);
  } else {
    positions = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(0);
  }
  // transformers: inv_freq [.., D/2, 1] @ positions [.., 1, L] in fp32, a product per element.
  at::Tensor freqs = positions.to(device, at::kFloat).unsqueeze(-1) * freq;  // [B or 1, L, D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                              // [B or 1, L, D]
  // attention_scaling is 1 for the default rule; cos and sin are cast to the hidden dtype.
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLRotaryEmbedding.forward (3D position_ids), apply_multimodal_rotary_pos_emb.
// transformers computes cos and sin [3, B, L, D] for all three position rows, then takes channel group i of
// mrope_section * 2 (the sections over the first D/2 channels, then again over the second) from row i % 3.
// Every step is elementwise (product, cos/sin, the cast to the hidden dtype), so choosing each channel's row
// first and computing only [B, L, D] gives the same numbers bit for bit.
std::pair<at::Tensor, at::Tensor> DecoderLLMTextEncoderImpl::multimodal_rotary(const at::Tensor& position_ids,
                                                                               at::ScalarType dtype,
                                                                               const at::Device& device) const {
  const int64_t half = config_.head_dim / 2;
  std::vector<int64_t> row_of;  // [D/2]: the position row (0 temporal, 1 height, 2 width) of each frequency
  for (size_t s = 0; s < config_.mrope_section.size(); ++s)
    row_of.insert(row_of.end(), static_cast<size_t>(config_.mrope_section[s]), static_cast<int64_t>(s % 3));
  if (static_cast<int64_t>(row_of.size()) != half)
    throw Error("text encoder: mrope_section " + c10::str(c10::IntArrayRef(config_.mrope_section)) + " does not cover head_dim / 2 = " +
                std::to_string(half) + " rotary frequencies");
  const at::Tensor rows = at::tensor(row_of, at::TensorOptions().dtype(at::kLong)).to(device);
  at::Tensor positions = position_ids.to(device, at::kFloat).index_select(0, rows).permute({1, 2, 0});  // [B, L, D/2]
  at::Tensor freqs = positions * inv_freq(device);                                                     // [B, L, D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                                                        // [B, L, D]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor DecoderLLMTextEncoderImpl::hidden_state(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                                   int64_t index) {
  return hidden_states(input_ids, attention_mask, {index}).front();
}

std::pair<at::Tensor, std::vector<int64_t>> DecoderLLMTextEncoderImpl::check_inputs(
    const at::Tensor& input_ids, const at::Tensor& attention_mask, const std::vector<int64_t>& indices) const {
  if (input_ids.dim() != 2 || input_ids.size(1) == 0 ||
      !at::isIntegralType(input_ids.scalar_type(), /*includeBool=*/false))
    throw Error("text encoder: input_ids must be an integer tensor [batch, length] with length >= 1, got " +
                std::string(input_ids.dtype().name()) + " " + c10::str(input_ids.sizes()));
  if (attention_mask.defined() &&
      (attention_mask.sizes() != input_ids.sizes() ||
       !(attention_mask.scalar_type() == at::kBool || at::isIntegralType(attention_mask.scalar_type(), false))))
    throw Error("text encoder: attention_mask must be a bool or integer tensor shaped like input_ids " +
                c10::str(input_ids.sizes()) + ", got " + std::string(attention_mask.dtype().name()) + " " +
                c10::str(attention_mask.sizes()));
  const int64_t n = config_.num_hidden_layers;
  std::vector<int64_t> runs;  // layers to run for each index: hidden_states[run]
  for (int64_t index : indices) {
    if (index < -(n + 1) || index > n)
      throw Error("text encoder: hidden state " + std::to_string(index) + " is out of range; expected -" +
                  std::to_string(n + 1) + " to " + std::to_string(n) + " (num_hidden_layers + 1 states)");
    runs.push_back(index < 0 ? n + 1 + index : index);
  }
  // Within Mistral's sliding window the sliding-window mask is the causal mask; past it, another mask.
  if (config_.sliding_window > 0 && input_ids.size(1) > config_.sliding_window)
    throw Error("text encoder: " + std::to_string(input_ids.size(1)) + " tokens are more than its sliding_window of " +
                std::to_string(config_.sliding_window) + ", which dpinfer does not implement; use a shorter "
                "max_sequence_length");
  at::Tensor ids = input_ids.to(at::kLong);
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= config_.vocab_size)
    throw Error("text encoder: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary of " +
                std::to_string(config_.vocab_size) + "; the tokenizer does not belong to this text encoder");
  return {ids, runs};
}

std::vector<at::Tensor> DecoderLLMTextEncoderImpl::hidden_states(const at::Tensor& input_ids,
                                                                 const at::Tensor& attention_mask,
                                                                 const std::vector<int64_t>& indices) {
  const auto [ids, runs] = check_inputs(input_ids, attention_mask, indices);
  const nn::OffloadedForward forward_offload(block_offload());  // drops a prefetched layer the run stops before
  at::Tensor h = embed_tokens_(ids.to(embed_tokens_->weight.device()));  // [B, L, D]
  return run_layers(h, attention_mask, at::Tensor(), runs);
}

at::Tensor DecoderLLMTextEncoderImpl::hidden_state_with_images(const at::Tensor& input_ids,
                                                               const at::Tensor& attention_mask,
                                                               const at::Tensor& image_embeds,
                                                               const std::vector<std::array<int64_t, 3>>& image_grid_thw,
                                                               int64_t index) {
  return hidden_states_with_images(input_ids, attention_mask, image_embeds, image_grid_thw, {index}).front();
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLModel.forward with pixel_values (get_image_features' output cat and cast
// to the embeddings' dtype, get_placeholder_mask, masked_scatter, get_rope_index), then Qwen2_5_VLTextModel.forward
// with those inputs_embeds and 3D position_ids.
std::vector<at::Tensor> DecoderLLMTextEncoderImpl::hidden_states_with_images(
    const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& image_embeds,
    const std::vector<std::array<int64_t, 3>>& image_grid_thw, const std::vector<int64_t>& indices) {
  if (config_.mrope_section.empty())
    throw Error("text encoder: images need Qwen2.5-VL's multimodal rotary positions, which this text encoder lacks");
  const auto [ids, runs] = check_inputs(input_ids, attention_mask, indices);
  const int64_t hidden = config_.hidden_size, merge = config_.spatial_merge_size;
  if (image_embeds.defined() && (image_embeds.dim() != 2 || image_embeds.size(1) != hidden ||
                                 !at::isFloatingType(image_embeds.scalar_type())))
    throw Error("text encoder: image_embeds must be a floating tensor [image tokens, " + std::to_string(hidden) +
                "], got " + std::string(image_embeds.dtype().name()) + " " + c10::str(image_embeds.sizes()));
  const int64_t features = image_embeds.defined() ? image_embeds.size(0) : 0;
  // get_placeholder_mask: every image token of the batch, padding included, takes one row of features.
  const at::Tensor image_mask = ids.eq(config_.image_token_id);  // [B, L]
  const int64_t tokens = image_mask.sum().item<int64_t>();
  if (tokens != features)
    throw Error("text encoder: image features and image tokens do not match: " + std::to_string(tokens) +
                " image tokens (id " + std::to_string(config_.image_token_id) + ") in input_ids, " +
                std::to_string(features) + " rows of image_embeds");
  // get_image_features splits the vision tower's output by t * h * w / merge^2 per image; the tower merges
  // merge x merge patches, so h and w are multiples of merge.
  int64_t grid_tokens = 0;
  for (size_t i = 0; i < image_grid_thw.size(); ++i) {
    const auto& [t, h, w] = image_grid_thw[i];
    if (t < 1 || h < 1 || w < 1 || h % merge != 0 || w % merge != 0)
      throw Error("text encoder: image " + std::to_string(i) + "'s grid {" + std::to_string(t) + ", " +
                  std::to_string(h) + ", " + std::to_string(w) + "} must be positive with h and w multiples of "
                  "spatial_merge_size = " + std::to_string(merge));
    grid_tokens += t * (h / merge) * (w / merge);
  }
  if (grid_tokens != features)
    throw Error("text encoder: the " + std::to_string(image_grid_thw.size()) + " image grids make " +
                std::to_string(grid_tokens) + " image tokens, image_embeds has " + std::to_string(features) + " rows");
  Qwen2_5_VLVisionTokens vision;
  vision.image_token_id = config_.image_token_id;
  vision.vision_start_token_id = config_.vision_start_token_id;
  vision.video_token_id = config_.video_token_id;
  vision.spatial_merge_size = merge;
  const at::Tensor position_ids = qwen2_5_vl_rope_index(ids, attention_mask, image_grid_thw, vision).position_ids;

  const nn::OffloadedForward forward_offload(block_offload());  // drops a prefetched layer the run stops before
  at::Tensor h = embed_tokens_(ids.to(embed_tokens_->weight.device()));  // [B, L, D]
  if (features > 0)
    h = h.masked_scatter(image_mask.to(h.device()).unsqueeze(-1).expand_as(h),
                         image_embeds.to(h.device(), h.scalar_type()));  // [B, L, D]
  return run_layers(h, attention_mask, position_ids, runs);
}

std::vector<at::Tensor> DecoderLLMTextEncoderImpl::run_layers(at::Tensor h, const at::Tensor& attention_mask,
                                                              const at::Tensor& position_ids,
                                                              const std::vector<int64_t>& runs) {
  const int64_t n = config_.num_hidden_layers;
  const int64_t deepest = runs.empty() ? 0 : *std::max_element(runs.begin(), runs.end());
  std::map<int64_t, at::Tensor> kept;  // the states asked for, by depth
  auto keep = [&](int64_t depth) {
    if (std::find(runs.begin(), runs.end(), depth) != runs.end()) kept[depth] = depth == n ? norm_(h) : h;  // only the last state is normed
  };
  keep(0);
  if (deepest > 0) {
    // A mask without padding is no mask (transformers drops it too): decided once here, so that
    // causal_attention does not check it again, with a device sync, in every layer.
    at::Tensor mask;
    if (attention_mask.defined() && !attention_mask.ne(0).all().item<bool>()) mask = attention_mask.to(h.device());
    const auto [cos, sin] = position_ids.defined() ? multimodal_rotary(position_ids, h.scalar_type(), h.device())
                                                   : rotary(mask, h.size(1), h.scalar_type(), h.device());
    for (int64_t i = 0; i < deepest; ++i) {
      const nn::BlockOnDevice on_device(block_offload(), *layers_[i]);  // --offload blocks: its group on the device
      h = layers_[i](h, cos, sin, mask);
      keep(i + 1);
    }
  }
  std::vector<at::Tensor> out;
  for (int64_t run : runs) out.push_back(kept.at(run));
  return out;
}

}  // namespace dpinfer::pipeline

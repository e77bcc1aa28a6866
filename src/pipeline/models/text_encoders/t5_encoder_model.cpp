// Ref: transformers/models/t5/modeling_t5.py (4.57.6): T5LayerNorm, T5DenseActDense,
// T5DenseGatedActDense, T5LayerFF, T5Attention, T5LayerSelfAttention, T5Block, T5Stack,
// T5EncoderModel; transformers/activations.py NewGELUActivation. Every operation is the one
// transformers runs, in its order and dtypes, so that fp32 and bf16 match it bit for bit.
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"

#include <torch/nn/modules/container/modulelist.h>

#include <c10/util/Half.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

// activations.py NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))),
// term by term (torch's gelu(approximate="tanh") rounds differently).
at::Tensor gelu_new(const at::Tensor& x) {
  return 0.5 * x * (1.0 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * at::pow(x, 3.0))));
}

at::Tensor activate(T5Config::Activation act, const at::Tensor& x) {
  switch (act) {
    case T5Config::Activation::kReLU: return at::relu(x);
    case T5Config::Activation::kGELUNew: return gelu_new(x);
    case T5Config::Activation::kGELU: return at::gelu(x);
    case T5Config::Activation::kSiLU: return at::silu(x);
  }
  return x;
}

// T5Block: "clamp inf values to enable fp16 training", applied whenever the stream is fp16.
at::Tensor clamp_fp16(const at::Tensor& h) {
  if (h.scalar_type() != at::kHalf) return h;
  const double max = double(std::numeric_limits<c10::Half>::max());
  // torch.where(isinf(h).any(), max - 1000, max): a 0-dim float32 tensor, as torch builds it.
  const at::Tensor value = at::where(at::isinf(h).any(), at::scalar_tensor(max - 1000, at::kFloat),
                                     at::scalar_tensor(max, at::kFloat))
                               .to(h.device());
  return at::clamp(h, -value, value);
}

// T5Attention._relative_position_bucket, bidirectional (the encoder): relative_position [L, L]
// long (memory - query) to bucket ids in [0, num_buckets).
at::Tensor relative_position_bucket(at::Tensor relative_position, int64_t num_buckets, int64_t max_distance) {
  num_buckets /= 2;
  at::Tensor buckets = (relative_position > 0).to(at::kLong) * num_buckets;
  relative_position = at::abs(relative_position);
  const int64_t max_exact = num_buckets / 2;
  const at::Tensor is_small = relative_position < max_exact;
  at::Tensor large = max_exact + (at::log(relative_position.to(at::kFloat) / max_exact) /
                                  std::log(double(max_distance) / double(max_exact)) * (num_buckets - max_exact))
                                     .to(at::kLong);
  large = at::min(large, at::full_like(large, num_buckets - 1));
  return buckets + at::where(is_small, relative_position, large);
}

}  // namespace

T5LayerNormImpl::T5LayerNormImpl(int64_t dim, double eps, const at::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::empty({dim}, options), false);
}

at::Tensor T5LayerNormImpl::forward(const at::Tensor& x) const {
  const at::Tensor variance = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor h = x * at::rsqrt(variance + eps_);  // promotes to fp32
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) h = h.to(weight.scalar_type());
  return weight * h;
}

T5AttentionImpl::T5AttentionImpl(const T5Config& config, bool has_relative_attention_bias,
                                 const at::TensorOptions& options)
    : config_(config) {
  const int64_t d = config.d_model, inner = config.inner_dim();
  q_ = register_module("q", nn::Linear(d, inner, false, options));
  k_ = register_module("k", nn::Linear(d, inner, false, options));
  v_ = register_module("v", nn::Linear(d, inner, false, options));
  o_ = register_module("o", nn::Linear(inner, d, false, options));
  if (has_relative_attention_bias) {
    relative_attention_bias_ = register_module(
        "relative_attention_bias", nn::Embedding(config.relative_attention_num_buckets, config.num_heads, options));
  }
}

at::Tensor T5AttentionImpl::compute_bias(int64_t length) const {
  const at::Device device = relative_attention_bias_->weight.device();
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor context = at::arange(length, longs).unsqueeze(1);  // [L, 1]
  const at::Tensor memory = at::arange(length, longs).unsqueeze(0);   // [1, L]
  const at::Tensor bucket = relative_position_bucket(memory - context, config_.relative_attention_num_buckets,
                                                     config_.relative_attention_max_distance);  // [L, L]
  return relative_attention_bias_->forward(bucket).permute({2, 0, 1}).unsqueeze(0);                      // [1, H, L, L]
}

at::Tensor T5AttentionImpl::forward(const at::Tensor& x, const at::Tensor& position_bias) {
  const int64_t batch = x.size(0), heads = config_.num_heads, d_kv = config_.d_kv;
  const at::Tensor q = q_(x).view({batch, -1, heads, d_kv}).transpose(1, 2);  // [B, H, L, d_kv]
  const at::Tensor k = k_(x).view({batch, -1, heads, d_kv}).transpose(1, 2);
  const at::Tensor v = v_(x).view({batch, -1, heads, d_kv}).transpose(1, 2);
  at::Tensor scores = at::matmul(q, k.transpose(3, 2));  // [B, H, L, L], no 1/sqrt(d_kv)
  scores += position_bias;
  const at::Tensor weights = at::softmax(scores.to(at::kFloat), -1).to(scores.scalar_type());
  const at::Tensor out = at::matmul(weights, v).transpose(1, 2).contiguous().view({batch, -1, config_.inner_dim()});
  return o_(out);
}

T5DenseReluDenseImpl::T5DenseReluDenseImpl(const T5Config& config, const at::TensorOptions& options,
                                           const at::TensorOptions& wo_options)
    : act_(config.dense_act_fn) {
  if (config.is_gated_act) {
    wi_0_ = register_module("wi_0", nn::Linear(config.d_model, config.d_ff, false, options));
    wi_1_ = register_module("wi_1", nn::Linear(config.d_model, config.d_ff, false, options));
  } else {
    wi_ = register_module("wi", nn::Linear(config.d_model, config.d_ff, false, options));
  }
  wo_ = register_module("wo", nn::Linear(config.d_ff, config.d_model, false, wo_options));
}

at::Tensor T5DenseReluDenseImpl::forward(const at::Tensor& x) {
  at::Tensor h = wi_.is_empty() ? activate(act_, wi_0_(x)) * wi_1_(x) : activate(act_, wi_(x));
  if (h.scalar_type() != wo_->weight.scalar_type()) h = h.to(wo_->weight.scalar_type());
  return wo_(h);
}

T5BlockImpl::T5BlockImpl(const T5Config& config, bool has_relative_attention_bias, const at::TensorOptions& options,
                         const at::TensorOptions& wo_options) {
  // layer.0 is T5LayerSelfAttention {SelfAttention, layer_norm}; layer.1 is T5LayerFF
  // {DenseReluDense, layer_norm}: plain modules that only carry the names.
  auto layer = register_module("layer", torch::nn::ModuleList());
  auto attention_layer = std::make_shared<torch::nn::Module>();
  self_attention_ = attention_layer->register_module(
      "SelfAttention", T5Attention(config, has_relative_attention_bias, options));
  attention_norm_ =
      attention_layer->register_module("layer_norm", T5LayerNorm(config.d_model, config.layer_norm_epsilon, options));
  auto ff_layer = std::make_shared<torch::nn::Module>();
  dense_ = ff_layer->register_module("DenseReluDense", T5DenseReluDense(config, options, wo_options));
  ff_norm_ = ff_layer->register_module("layer_norm", T5LayerNorm(config.d_model, config.layer_norm_epsilon, options));
  layer->push_back(attention_layer);
  layer->push_back(ff_layer);
}

at::Tensor T5BlockImpl::forward(const at::Tensor& x, const at::Tensor& position_bias) {
  at::Tensor h = clamp_fp16(x + self_attention_(attention_norm_(x), position_bias));
  return clamp_fp16(h + dense_(ff_norm_(h)));
}

T5EncoderModelImpl::T5EncoderModelImpl(const T5Config& config, const at::TensorOptions& options) : config_(config) {
  // T5PreTrainedModel._keep_in_fp32_modules = ["wo"], which from_pretrained honours for fp16 only.
  const at::TensorOptions wo_options =
      options.dtype().toScalarType() == at::kHalf ? options.dtype(at::kFloat) : options;
  shared_ = register_module("shared", nn::Embedding(config.vocab_size, config.d_model, options));
  auto encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
  auto block = encoder->register_module("block", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) {
    blocks_.push_back(T5Block(config, /*has_relative_attention_bias=*/i == 0, options, wo_options));
    block->push_back(blocks_.back());
  }
  final_layer_norm_ =
      encoder->register_module("final_layer_norm", T5LayerNorm(config.d_model, config.layer_norm_epsilon, options));
}

at::Tensor T5EncoderModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  if (input_ids.dim() != 2 || input_ids.size(1) == 0 ||
      !at::isIntegralType(input_ids.scalar_type(), /*includeBool=*/false))
    throw Error("T5 text encoder: input_ids must be an integer tensor [batch, length] with length >= 1, got " +
                std::string(input_ids.dtype().name()) + " " + c10::str(input_ids.sizes()));
  if (attention_mask.defined() &&
      (attention_mask.sizes() != input_ids.sizes() ||
       !(attention_mask.scalar_type() == at::kBool || at::isIntegralType(attention_mask.scalar_type(), false))))
    throw Error("T5 text encoder: attention_mask must be a bool or integer tensor shaped like input_ids " +
                c10::str(input_ids.sizes()) + ", got " + std::string(attention_mask.dtype().name()) + " " +
                c10::str(attention_mask.sizes()));
  const at::Tensor ids = input_ids.to(shared_->weight.device(), at::kLong);
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= config_.vocab_size)
    throw Error("T5 text encoder: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary of " +
                std::to_string(config_.vocab_size) + "; the tokenizer does not belong to this text encoder");

  const nn::OffloadedForward forward_offload(block_offload());
  at::Tensor h = shared_(ids);  // [B, L, d_model] (T5Stack's embed_tokens is `shared`)
  at::Tensor position_bias;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const nn::BlockOnDevice on_device(block_offload(), *blocks_[i]);  // --offload blocks: its group on the device
    if (i == 0) {
      // T5Stack: block 0's relative bias plus the extended mask, (1 - mask) * finfo(dtype).min in
      // the embeddings' dtype, is every block's position_bias. Without a mask transformers adds a
      // mask of ones, i.e. zeros, which changes nothing, so none is added here.
      position_bias = blocks_.front()->self_attention()->compute_bias(h.size(1));  // [1, H, L, L]
      if (attention_mask.defined()) {
        const at::ScalarType dtype = h.scalar_type();
        const at::Tensor m = attention_mask.to(h.device()).unsqueeze(1).unsqueeze(1).to(dtype);  // [B, 1, 1, L]
        double lowest = std::numeric_limits<float>::lowest();
        if (dtype == at::kHalf) lowest = double(std::numeric_limits<c10::Half>::lowest());
        if (dtype == at::kBFloat16) lowest = double(std::numeric_limits<c10::BFloat16>::lowest());
        position_bias = position_bias + (1.0 - m) * lowest;  // [B, H, L, L]
      }
    }
    h = blocks_[i](h, position_bias);
  }
  return final_layer_norm_(h);
}

}  // namespace dpinfer::pipeline

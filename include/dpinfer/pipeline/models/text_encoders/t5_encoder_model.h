#pragma once
// transformers' T5EncoderModel (models/t5/modeling_t5.py, 4.57): the T5 text encoder of FLUX.1
// (text_encoder_2), SD3 (text_encoder_3) and Chroma (text_encoder). Module names are the
// checkpoint's: shared, encoder.block.N.layer.{0.SelfAttention,0.layer_norm,1.DenseReluDense,
// 1.layer_norm}, encoder.final_layer_norm.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/text_encoders/t5_config.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// transformers' T5LayerNorm: RMS over the last dimension with the variance computed in fp32,
/// x * rsqrt(var + eps) (in fp32 when x is half: the product promotes), cast to the weight's
/// dtype when that is fp16/bf16, then weight * x. No mean, no bias.
class T5LayerNormImpl : public torch::nn::Module {
 public:
  T5LayerNormImpl(int64_t dim, double eps, const at::TensorOptions& options);
  /// [..., dim] to [..., dim], in the weight's dtype when that is half, else in x's promoted with it.
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(T5LayerNorm);

/// transformers' T5Attention as the encoder runs it: q, k, v, o without biases, no 1/sqrt(d)
/// scaling, scores + position_bias, softmax in fp32 cast back. Block 0's also holds
/// relative_attention_bias [num_buckets, heads] and computes the bias every block shares.
class T5AttentionImpl : public torch::nn::Module {
 public:
  T5AttentionImpl(const T5Config& config, bool has_relative_attention_bias, const at::TensorOptions& options);
  /// x [B, L, d_model]; position_bias broadcastable to [B, H, L, L] in x's dtype.
  /// Returns [B, L, d_model].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& position_bias);
  /// T5Attention.compute_bias (bidirectional buckets): [1, H, length, length] in the bias
  /// weight's dtype, on its device. Only for the block that has relative_attention_bias.
  at::Tensor compute_bias(int64_t length) const;

 private:
  T5Config config_;
  nn::Linear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr};
  nn::Embedding relative_attention_bias_{nullptr};
};
TORCH_MODULE(T5Attention);

/// transformers' T5DenseGatedActDense (wi_0, wi_1, wo: wo(act(wi_0 x) * wi_1 x)) or
/// T5DenseActDense (wi, wo: wo(act(wi x))), as config.is_gated_act says. Its input is cast
/// to wo's dtype first, which differs from the run dtype in fp16 (see T5EncoderModelImpl).
class T5DenseReluDenseImpl : public torch::nn::Module {
 public:
  T5DenseReluDenseImpl(const T5Config& config, const at::TensorOptions& options,
                       const at::TensorOptions& wo_options);
  /// [B, L, d_model] to [B, L, d_model] in wo's dtype.
  at::Tensor forward(const at::Tensor& x);

 private:
  T5Config::Activation act_;
  nn::Linear wi_{nullptr}, wi_0_{nullptr}, wi_1_{nullptr}, wo_{nullptr};
};
TORCH_MODULE(T5DenseReluDense);

/// transformers' T5Block of the encoder: layer.0 (T5LayerSelfAttention: x + SelfAttention(
/// layer_norm(x))), layer.1 (T5LayerFF: x + DenseReluDense(layer_norm(x))), with the fp16
/// clamp of inf values after each, as transformers does when the stream is fp16.
class T5BlockImpl : public torch::nn::Module {
 public:
  T5BlockImpl(const T5Config& config, bool has_relative_attention_bias, const at::TensorOptions& options,
              const at::TensorOptions& wo_options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& position_bias);
  T5Attention& self_attention() { return self_attention_; }

 private:
  T5Attention self_attention_{nullptr};
  T5LayerNorm attention_norm_{nullptr}, ff_norm_{nullptr};
  T5DenseReluDense dense_{nullptr};
};
TORCH_MODULE(T5Block);

/// The encoder. Build it with the run dtype in `options`: in fp16 every `wo` is built in fp32,
/// as transformers' from_pretrained keeps T5's _keep_in_fp32_modules ("wo") for fp16 loads
/// (not for bf16), and the residual stream then runs in fp32 after the first feed-forward.
/// encoder.embed_tokens is shared (tied): the module has shared.weight only, and the
/// model-class row loads a file's encoder.embed_tokens.weight into it (KeyRenames::tied).
/// --offload blocks keeps its blocks (encoder.block) in host memory between uses (nn/offload.h).
class T5EncoderModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  explicit T5EncoderModelImpl(const T5Config& config, const at::TensorOptions& options = nn::default_options());

  /// T5EncoderModel(input_ids, attention_mask).last_hidden_state: input_ids [B, L] integer;
  /// attention_mask [B, L] (bool or integer, nonzero = token) or undefined for none (FLUX.1 and
  /// SD3 pass none; Chroma passes one). Returns [B, L, d_model] in the run dtype (the final
  /// norm's). Throws dpinfer::Error for bad shapes or ids outside the vocabulary.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {});

  const T5Config& config() const { return config_; }
  std::vector<std::string> block_lists() const override { return {"encoder.block"}; }

 private:
  T5Config config_;
  nn::Embedding shared_{nullptr};
  std::vector<T5Block> blocks_;
  T5LayerNorm final_layer_norm_{nullptr};
};
TORCH_MODULE(T5EncoderModel);

}  // namespace dpinfer::pipeline

#pragma once
// FLUX.2's denoiser: diffusers' Flux2Transformer2DModel. Like FLUX.1's (flux_transformer.h), double-stream
// blocks then single-stream blocks over [text, image] tokens placed by real RoPE, but: no biases anywhere;
// the AdaLN modulation computed once per forward and shared by every block (double_stream_modulation_img /
// _txt, single_stream_modulation); SwiGLU feed-forwards with a fused input projection; single-stream
// blocks whose QKV and MLP input are one Linear (to_qkv_mlp_proj) and whose attention and MLP outputs
// are one (to_out); RoPE on four id axes (T, H, W, L); the text states are the stacked hidden states of
// the text encoder, with no pooled vector; the guidance embedding only where configured ([dev]).

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/flux2_transformer_config.h"
#include "dpinfer/pipeline/nn/joint_attention.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/rms_norm.h"
#include "dpinfer/pipeline/nn/rope.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// diffusers' Flux2FeedForward: linear_in (dim -> 2 * hidden, no bias), Flux2SwiGLU (silu(first half) *
/// second half), linear_out (hidden -> dim, no bias).
class Flux2FeedForwardImpl : public torch::nn::Module {
 public:
  Flux2FeedForwardImpl(int64_t dim, int64_t hidden, const at::TensorOptions& options);
  /// [..., dim] to [..., dim].
  at::Tensor forward(const at::Tensor& x);

 private:
  nn::Linear linear_in_{nullptr}, linear_out_{nullptr};
};
TORCH_MODULE(Flux2FeedForward);

/// diffusers' Flux2TransformerBlock. With the image stream's six modulation vectors (shift, scale, gate
/// for the attention, then for the MLP) and the text stream's six, each [B, 1, dim]:
///   x += gate_msa * attn(norm1(x) * (1 + scale_msa) + shift_msa)      (joint over [text, image])
///   x += gate_mlp * ff(norm2(x) * (1 + scale_mlp) + shift_mlp)
/// the same for the text stream (norm1_context, norm2_context, ff_context), clipped to +-65504 in
/// float16 as diffusers clips it. The attention is Flux2Attention: nn::DoubleStreamAttention with no
/// biases and torch.nn.RMSNorm QK norms.
class Flux2TransformerBlockImpl : public torch::nn::Module {
 public:
  Flux2TransformerBlockImpl(const Flux2TransformerConfig& config, const at::TensorOptions& options);

  struct Output {
    at::Tensor image;  ///< [B, N_img, dim]
    at::Tensor text;   ///< [B, N_txt, dim]
  };

  /// image [B, N_img, dim], text [B, N_txt, dim]; img_mod and txt_mod the six vectors [B, 1, dim] each;
  /// freqs over [text, image].
  Output forward(const at::Tensor& image, const at::Tensor& text, const std::vector<at::Tensor>& img_mod,
                 const std::vector<at::Tensor>& txt_mod, const nn::RotaryCosSin& freqs);

 private:
  int64_t dim_;
  double eps_;
  nn::DoubleStreamAttention attn_{nullptr};
  Flux2FeedForward ff_{nullptr}, ff_context_{nullptr};
};
TORCH_MODULE(Flux2TransformerBlock);

/// diffusers' Flux2ParallelSelfAttention with Flux2ParallelSelfAttnProcessor: to_qkv_mlp_proj (dim ->
/// 3 inner + 2 mlp_hidden, no bias) split into q, k, v and the MLP input; norm_q, norm_k (torch.nn.RMSNorm
/// over each head); RoPE on q and k; SDPA; SwiGLU on the MLP input; to_out (inner + mlp_hidden -> dim, no
/// bias) of the two concatenated.
class Flux2ParallelSelfAttentionImpl : public torch::nn::Module {
 public:
  Flux2ParallelSelfAttentionImpl(const Flux2TransformerConfig& config, const at::TensorOptions& options);
  /// x [B, N, dim], freqs over the N tokens, to [B, N, dim].
  at::Tensor forward(const at::Tensor& x, const nn::RotaryCosSin& freqs);

 private:
  int64_t heads_, inner_dim_, mlp_hidden_dim_;
  nn::Linear to_qkv_mlp_proj_{nullptr}, to_out_{nullptr};
  nn::RMSNorm norm_q_{nullptr}, norm_k_{nullptr};
};
TORCH_MODULE(Flux2ParallelSelfAttention);

/// diffusers' Flux2SingleTransformerBlock over x = [text, image] with the three single-stream modulation
/// vectors (shift, scale, gate, [B, 1, dim] each): x += gate * attn(norm(x) * (1 + scale) + shift), clipped
/// to +-65504 in float16.
class Flux2SingleTransformerBlockImpl : public torch::nn::Module {
 public:
  Flux2SingleTransformerBlockImpl(const Flux2TransformerConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const std::vector<at::Tensor>& mod, const nn::RotaryCosSin& freqs);

 private:
  int64_t dim_;
  double eps_;
  Flux2ParallelSelfAttention attn_{nullptr};
};
TORCH_MODULE(Flux2SingleTransformerBlock);

/// diffusers' Flux2Transformer2DModel (models/transformers/transformer_flux2.py, 0.37.0). Children carry
/// diffusers' state_dict names: x_embedder, context_embedder, time_guidance_embed (.timestep_embedder,
/// .guidance_embedder with guidance_embeds; linear_1 and linear_2 without biases),
/// double_stream_modulation_img / _txt and single_stream_modulation (.linear), transformer_blocks,
/// single_transformer_blocks, norm_out (.linear), proj_out. Parameters are allocated uninitialised with
/// `options`.
class Flux2Transformer2DModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  /// --offload blocks (nn/offload.h): the block lists diffusers' group offloading matches, in forward order.
  std::vector<std::string> block_lists() const override { return {"transformer_blocks", "single_transformer_blocks"}; }
  explicit Flux2Transformer2DModelImpl(const Flux2TransformerConfig& config,
                                       const at::TensorOptions& options = nn::default_options());

  /// The model's prediction, as diffusers' forward computes it for Flux2KleinPipeline's call
  ///   transformer(hidden_states, timestep=t / 1000, guidance, encoder_hidden_states, txt_ids, img_ids).
  /// - hidden_states [B, L_img, in_channels]: packed latents (and reference tokens after them).
  /// - encoder_hidden_states [B, L_txt, joint_attention_dim]: the stacked text-encoder states.
  /// - timestep [B] or 0-d: t / 1000, cast to the weights' dtype and multiplied by 1000 there.
  /// - img_ids [L_img, 4] or [B, L_img, 4], txt_ids [L_txt, 4] or [B, L_txt, 4] (the first row taken, as
  ///   diffusers takes it): the RoPE positions (any real dtype).
  /// - guidance [B] or 0-d, or undefined; used only when the model has guidance_embeds (diffusers ignores
  ///   it otherwise, and a model with guidance_embeds given none runs without it, as there).
  /// Inputs are cast to the weights' dtype and device. Returns [B, L_img, patch_size^2 * out_channels] in
  /// the weights' dtype. Throws dpinfer::Error for inputs that do not fit.
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& timestep, const at::Tensor& img_ids, const at::Tensor& txt_ids,
                     const at::Tensor& guidance = {});

  const Flux2TransformerConfig& config() const { return config_; }

 private:
  /// Flux2Modulation: linear(silu(temb)) unsqueezed to [B, 1, n * dim] and chunked into n [B, 1, dim].
  static std::vector<at::Tensor> modulation(nn::Linear& linear, const at::Tensor& temb, int64_t n);

  Flux2TransformerConfig config_;
  nn::Linear x_embedder_{nullptr}, context_embedder_{nullptr}, proj_out_{nullptr};
  nn::Linear timestep_linear_1_{nullptr}, timestep_linear_2_{nullptr};
  nn::Linear guidance_linear_1_{nullptr}, guidance_linear_2_{nullptr};
  nn::Linear double_mod_img_{nullptr}, double_mod_txt_{nullptr}, single_mod_{nullptr};
  std::vector<Flux2TransformerBlock> blocks_;
  std::vector<Flux2SingleTransformerBlock> single_blocks_;
  nn::Linear norm_out_linear_{nullptr};
};
TORCH_MODULE(Flux2Transformer2DModel);

}  // namespace dpinfer::pipeline

#pragma once
// FLUX.1's denoiser: diffusers' FluxTransformer2DModel. Packed 2x2 latent tokens and T5 text
// tokens go through double-stream blocks (each stream with its own AdaLN-Zero, projections, QK
// norms and GELU MLP, meeting in one joint attention), then single-stream blocks over the joint
// sequence (attention and MLP side by side, fused into one output projection), placed by RoPE on
// three id axes (nn::rotary_cos_sin). The timestep, the distilled guidance value (FLUX.1-dev) and
// the pooled CLIP embedding form the conditioning vector. Only the image tokens come out.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/flux_transformer_config.h"
#include "dpinfer/pipeline/nn/adaln.h"
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/pipeline/nn/feed_forward.h"
#include "dpinfer/pipeline/nn/block_cache.h"
#include "dpinfer/pipeline/nn/joint_attention.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/rope.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// diffusers' FluxTransformerBlock (eps 1e-6). Per stream s (image: norm1, norm2, ff; text:
/// norm1_context, norm2_context, ff_context): AdaLayerNormZero of temb gives the modulated
/// norm1(x) and gate_msa, shift_mlp, scale_mlp, gate_mlp; then
///   x += gate_msa * attn(...)                                   (joint over both streams)
///   x += gate_mlp * ff(norm2(x) * (1 + scale_mlp) + shift_mlp)   (GELU-tanh, 4x)
/// A float16 text stream is clipped to +-65504 as diffusers clips it (the image stream is not).
///
/// With Modulation::kGiven it is Chroma's ChromaTransformerBlock (transformer_chroma.py) instead:
/// the same block whose norm1 / norm1_context (ChromaAdaLayerNormZeroPruned) have no Linear and take
/// the six modulation vectors ready-made from the model's approximator, and whose joint attention
/// takes an attention mask.
class FluxTransformerBlockImpl : public torch::nn::Module {
 public:
  /// Where the AdaLN-Zero modulation comes from.
  enum class Modulation {
    kLinear,  ///< Flux: norm1.linear(silu(temb)) per stream
    kGiven,   ///< Chroma: passed in, no parameters (the "pruned" norms)
  };

  FluxTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, const at::TensorOptions& options,
                           Modulation modulation = Modulation::kLinear);

  struct Output {
    at::Tensor image;  ///< [B, N_img, dim]
    at::Tensor text;   ///< [B, N_txt, dim]
  };

  /// Flux: image [B, N_img, dim], text [B, N_txt, dim], temb [B, dim]; freqs over [text, image].
  Output forward(const at::Tensor& image, const at::Tensor& text, const at::Tensor& temb,
                 const nn::RotaryCosSin& freqs);

  /// Chroma (Modulation::kGiven): mod [B, 12, dim], the image stream's shift_msa, scale_msa, gate_msa,
  /// shift_mlp, scale_mlp, gate_mlp then the text stream's; attn_mask SDPA's [B, 1, N, N] over [text,
  /// image] or undefined.
  Output forward_modulated(const at::Tensor& image, const at::Tensor& text, const at::Tensor& mod,
                           const nn::RotaryCosSin& freqs, const at::Tensor& attn_mask);

 private:
  /// The block after the modulation vectors (6 per stream, [B, dim] each, in AdaLayerNormZero's order).
  Output run(const at::Tensor& image, const at::Tensor& text, const std::vector<at::Tensor>& img_mod,
             const std::vector<at::Tensor>& txt_mod, const nn::RotaryCosSin& freqs, const at::Tensor& attn_mask);

  int64_t dim_;
  nn::AdaLayerNormZero norm1_{nullptr}, norm1_context_{nullptr};
  nn::DoubleStreamAttention attn_{nullptr};
  nn::LayerNorm norm2_{nullptr}, norm2_context_{nullptr};
  nn::FeedForward ff_{nullptr}, ff_context_{nullptr};
};
TORCH_MODULE(FluxTransformerBlock);

/// diffusers' FluxSingleTransformerBlock (mlp_ratio 4): over the joint sequence x = [text, image],
/// AdaLayerNormZeroSingle (norm) gives n = the modulated norm(x) and gate; then
///   x += gate * proj_out(cat(attn(n), gelu_tanh(proj_mlp(n))))
/// where attn has no output projection (pre_only). float16 results are clipped to +-65504.
/// With Modulation::kGiven it is Chroma's ChromaSingleTransformerBlock: norm
/// (ChromaAdaLayerNormZeroSinglePruned) has no Linear and the attention takes a mask.
class FluxSingleTransformerBlockImpl : public torch::nn::Module {
 public:
  using Modulation = FluxTransformerBlockImpl::Modulation;

  FluxSingleTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, const at::TensorOptions& options,
                                 Modulation modulation = Modulation::kLinear);

  /// Flux: x [B, N_txt + N_img, dim], temb [B, dim], freqs over the N_txt + N_img tokens.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const nn::RotaryCosSin& freqs);

  /// Chroma (Modulation::kGiven): mod [B, 3, dim] (shift_msa, scale_msa, gate_msa); attn_mask SDPA's
  /// [B, 1, N, N] or undefined.
  at::Tensor forward_modulated(const at::Tensor& x, const at::Tensor& mod, const nn::RotaryCosSin& freqs,
                               const at::Tensor& attn_mask);

 private:
  at::Tensor run(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, const at::Tensor& gate,
                 const nn::RotaryCosSin& freqs, const at::Tensor& attn_mask);

  int64_t dim_;
  nn::AdaLayerNormZero norm_{nullptr};
  nn::Linear proj_mlp_{nullptr}, proj_out_{nullptr};
  nn::JointAttention attn_{nullptr};
};
TORCH_MODULE(FluxSingleTransformerBlock);

/// diffusers' FluxTransformer2DModel (models/transformers/transformer_flux.py, 0.36.0). Children
/// carry diffusers' state_dict names: x_embedder, context_embedder, time_text_embed
/// (.timestep_embedder, .guidance_embedder with guidance_embeds, .text_embedder; time_proj has no
/// parameters), transformer_blocks, single_transformer_blocks, norm_out (.linear), proj_out;
/// pos_embed has no parameters. Parameters are allocated uninitialised with `options`.
class FluxTransformer2DModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  /// --offload blocks (nn/offload.h): the block lists diffusers' group offloading matches, in forward order.
  std::vector<std::string> block_lists() const override { return {"transformer_blocks", "single_transformer_blocks"}; }
  explicit FluxTransformer2DModelImpl(const FluxTransformerConfig& config,
                                      const at::TensorOptions& options = nn::default_options());

  /// The model's prediction, as diffusers' forward computes it for FluxPipeline's call
  ///   transformer(hidden_states, timestep=t / 1000, guidance, pooled_projections,
  ///               encoder_hidden_states, txt_ids, img_ids).
  /// - hidden_states [B, L_img, in_channels]: packed latents.
  /// - encoder_hidden_states [B, L_txt, joint_attention_dim]: T5's last hidden states.
  /// - pooled_projections [B, pooled_projection_dim]: CLIP's pooled output.
  /// - timestep [B] or 0-d: t / 1000. Cast to the weights' dtype and multiplied by 1000 there (so
  ///   bfloat16 rounds twice), as diffusers does.
  /// - img_ids [L_img, 3], txt_ids [L_txt, 3]: the RoPE positions (any real dtype).
  /// - guidance [B] or 0-d: the distilled guidance scale, required when guidance_embeds is set and
  ///   refused otherwise (diffusers raises TypeError both ways); cast and scaled as the timestep.
  /// - cache: set, the blocks run under this step cache's state (nn/block_cache.h: First Block Cache or
  ///   DBCache), which sees them as one list, the double-stream blocks then the single-stream ones.
  /// Inputs are cast to the weights' dtype and device. Returns [B, L_img, patch_size^2 *
  /// out_channels] in the weights' dtype. Throws dpinfer::Error for inputs that do not fit.
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& pooled_projections, const at::Tensor& timestep, const at::Tensor& img_ids,
                     const at::Tensor& txt_ids, const at::Tensor& guidance = {}, nn::BlockCache* cache = nullptr);

  const FluxTransformerConfig& config() const { return config_; }

  /// FluxPosEmbed's theta, fixed in diffusers (not a config field).
  static constexpr double kRopeTheta = 10000.0;
  /// The Timesteps width of the combined embeddings.
  static constexpr int64_t kTimestepChannels = 256;

 private:
  FluxTransformerConfig config_;
  nn::Linear x_embedder_{nullptr}, context_embedder_{nullptr}, proj_out_{nullptr};
  nn::TimestepEmbedding timestep_embedder_{nullptr}, guidance_embedder_{nullptr};
  nn::PixArtAlphaTextProjection text_embedder_{nullptr};
  std::vector<FluxTransformerBlock> blocks_;
  std::vector<FluxSingleTransformerBlock> single_blocks_;
  nn::AdaLayerNormContinuous norm_out_{nullptr};
};
TORCH_MODULE(FluxTransformer2DModel);

}  // namespace dpinfer::pipeline

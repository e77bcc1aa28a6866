#pragma once
// Chroma's denoiser: diffusers' ChromaTransformer2DModel, FLUX.1-schnell's double- and single-stream
// blocks (FluxTransformerBlock, FluxSingleTransformerBlock with Modulation::kGiven) without their
// per-block AdaLN Linears and without CLIP: one "distilled guidance layer" (ChromaApproximator) turns
// the timestep and each modulation slot's index into every block's shift, scale and gate at once.
// The text tokens carry an attention mask (all but one padding token masked, as ChromaPipeline builds
// it). RoPE as Flux. Only the image tokens come out.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/chroma_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer.h"
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/rms_norm.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// diffusers' ChromaApproximator (transformer_chroma.py), the model's distilled_guidance_layer:
///   x = in_proj(x); for each layer i: x = x + layers[i](norms[i](x)); return out_proj(x)
/// with layers PixArtAlphaTextProjection(hidden, hidden, act_fn "silu") and norms torch.nn.RMSNorm(hidden)
/// with eps None (the input type's machine epsilon).
class ChromaApproximatorImpl : public torch::nn::Module {
 public:
  ChromaApproximatorImpl(int64_t in_dim, int64_t out_dim, int64_t hidden_dim, int64_t n_layers,
                         const at::TensorOptions& options);
  /// [..., in_dim] to [..., out_dim].
  at::Tensor forward(const at::Tensor& x);

 private:
  nn::Linear in_proj_{nullptr}, out_proj_{nullptr};
  std::vector<nn::PixArtAlphaTextProjection> layers_;
  std::vector<nn::RMSNorm> norms_;
};
TORCH_MODULE(ChromaApproximator);

/// diffusers' ChromaTransformer2DModel (models/transformers/transformer_chroma.py, 0.36.0). Children
/// carry diffusers' state_dict names: distilled_guidance_layer (.in_proj, .layers.i.linear_1/2,
/// .norms.i, .out_proj), context_embedder, x_embedder, transformer_blocks, single_transformer_blocks,
/// proj_out; time_text_embed, pos_embed and norm_out have no parameters (time_text_embed's mod_proj
/// is a non-persistent buffer, recomputed here). Parameters are allocated uninitialised with `options`.
class ChromaTransformer2DModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  /// --offload blocks (nn/offload.h): the block lists diffusers' group offloading matches, in forward order.
  std::vector<std::string> block_lists() const override { return {"transformer_blocks", "single_transformer_blocks"}; }
  explicit ChromaTransformer2DModelImpl(const ChromaTransformerConfig& config,
                                        const at::TensorOptions& options = nn::default_options());

  /// The model's prediction, as diffusers' forward computes it for ChromaPipeline's call
  ///   transformer(hidden_states, timestep=t / 1000, encoder_hidden_states, txt_ids, img_ids, attention_mask).
  /// - hidden_states [B, L_img, in_channels]: packed latents.
  /// - encoder_hidden_states [B, L_txt, joint_attention_dim]: T5's last hidden states.
  /// - timestep [B] or 0-d: t / 1000. Cast to the weights' dtype and multiplied by 1000 there (so
  ///   bfloat16 rounds twice), as diffusers does.
  /// - img_ids [L_img, 3], txt_ids [L_txt, 3]: the RoPE positions (any real dtype).
  /// - attention_mask [B, L_txt + L_img] over [text, image] or undefined. Every block turns it into
  ///   mask[:, None, None, :] * mask[:, None, :, None], SDPA's attn_mask: a bool mask stays one; a
  ///   floating mask (ChromaPipeline passes 0/1 in the prompt embeddings' dtype) is cast to the
  ///   weights' dtype and is, as in diffusers, added to the attention scores.
  /// - double_cache, single_cache: set, the double-stream blocks, then the single-stream ones, run under these
  ///   DBCache states (nn/dbcache.h), one per list, as cache-dit's Chroma adapter caches the two lists apart (the
  ///   single-stream list's one stream is the joint [text, image] sequence).
  /// Inputs are cast to the weights' dtype and device. Returns [B, L_img, patch_size^2 * out_channels]
  /// in the weights' dtype. Throws dpinfer::Error for inputs that do not fit.
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& timestep, const at::Tensor& img_ids, const at::Tensor& txt_ids,
                     const at::Tensor& attention_mask = {}, nn::BlockCache* double_cache = nullptr,
                     nn::BlockCache* single_cache = nullptr);

  const ChromaTransformerConfig& config() const { return config_; }

  /// The approximator's input [B, mod_index_length, approximator_num_channels] for timestep values
  /// t [B] already scaled (t.to(dtype) * 1000), in `dtype`: ChromaCombinedTimestepTextProjEmbeddings.
  at::Tensor approximator_input(const at::Tensor& t, at::ScalarType dtype) const;

  /// FluxPosEmbed's theta, fixed in diffusers (not a config field).
  static constexpr double kRopeTheta = 10000.0;

 private:
  ChromaTransformerConfig config_;
  ChromaApproximator distilled_guidance_layer_{nullptr};
  nn::Linear x_embedder_{nullptr}, context_embedder_{nullptr}, proj_out_{nullptr};
  std::vector<FluxTransformerBlock> blocks_;
  std::vector<FluxSingleTransformerBlock> single_blocks_;
  /// approximator_input's constants, computed on the CPU as diffusers computes them and moved to the device once
  /// per device and dtype, not at every call (a call captured into a CUDA graph may copy nothing from the host):
  /// guidance_proj of one zero [1, channels], and mod_proj [mod_index_length, 2 channels].
  mutable at::Tensor guidance_row_, mod_table_;
};
TORCH_MODULE(ChromaTransformer2DModel);

}  // namespace dpinfer::pipeline

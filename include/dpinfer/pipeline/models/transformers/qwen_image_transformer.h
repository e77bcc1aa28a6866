#pragma once
// Qwen-Image's denoiser: diffusers' QwenImageTransformer2DModel, a double-stream MMDiT. Image
// tokens (packed 2x2 latents) and text tokens (Qwen2.5-VL hidden states) keep their own weights
// in every block (AdaLN modulation, QK norms, projections, GELU MLPs) and meet in one joint
// attention, placed by MSRoPE (nn::MSRope). Only the image tokens come out.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/qwen_image_transformer_config.h"
#include "dpinfer/pipeline/nn/adaln.h"
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/pipeline/nn/feed_forward.h"
#include "dpinfer/pipeline/nn/block_cache.h"
#include "dpinfer/pipeline/nn/joint_attention.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/ms_rope.h"
#include "dpinfer/pipeline/nn/rms_norm.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// How the joint attention treats the text rows that encoder_hidden_states_mask marks as padding.
enum class QwenTextPadding {
  /// As diffusers 0.36.0: the mask is never used (QwenDoubleStreamAttnProcessor2_0 is called with
  /// attention_mask None, diffusers issue #12294), so padding rows are keys like any other and an
  /// item's output depends on how far its prompt was padded.
  kAttended,
  /// Padding rows are masked out as keys (a [B, 1, 1, L_txt + L_img] SDPA mask, the fix diffusers
  /// made after 0.36.0 in PR #12702; not compared with it here): an item's output no longer
  /// depends on its batch-mates. Not what the 0.36.0 goldens record.
  kMasked,
};

/// diffusers' QwenImageTransformerBlock (eps 1e-6). Per stream s (img, txt): s_mod = (SiLU,
/// Linear(dim, 6 dim)) of temb gives shift1, scale1, gate1, shift2, scale2, gate2; then
///   x += gate1 * attn(s_norm1(x) * (1 + scale1) + shift1)   (joint over both streams)
///   x += gate2 * s_mlp(s_norm2(x) * (1 + scale2) + shift2)   (GELU-tanh, 4x)
/// with LayerNorms without affine; float16 results are clipped to +-65504 as diffusers clips them.
class QwenImageTransformerBlockImpl : public torch::nn::Module {
 public:
  QwenImageTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, const at::TensorOptions& options);

  struct Output {
    at::Tensor image;  ///< [B, N_img, dim]
    at::Tensor text;   ///< [B, N_txt, dim]
  };

  /// image [B, N_img, dim], text [B, N_txt, dim], temb [B, dim]; freqs and mask as
  /// nn::DoubleStreamAttention takes them.
  Output forward(const at::Tensor& image, const at::Tensor& text, const at::Tensor& temb,
                 const nn::MSRope::Freqs& freqs, const at::Tensor& mask);

 private:
  nn::AdaLNModulation img_mod_{nullptr}, txt_mod_{nullptr};
  nn::LayerNorm img_norm1_{nullptr}, img_norm2_{nullptr}, txt_norm1_{nullptr}, txt_norm2_{nullptr};
  nn::DoubleStreamAttention attn_{nullptr};
  nn::FeedForward img_mlp_{nullptr}, txt_mlp_{nullptr};
};
TORCH_MODULE(QwenImageTransformerBlock);

/// diffusers' QwenImageTransformer2DModel (models/transformers/transformer_qwenimage.py, 0.36.0).
/// Children carry diffusers' state_dict names: img_in, txt_norm, txt_in, time_text_embed
/// (.timestep_embedder.linear_1/linear_2; time_proj and pos_embed have no parameters),
/// transformer_blocks, norm_out (.linear), proj_out. Parameters are allocated uninitialised with
/// `options`.
class QwenImageTransformer2DModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  /// --offload blocks (nn/offload.h): the block lists diffusers' group offloading matches, in forward order.
  std::vector<std::string> block_lists() const override { return {"transformer_blocks"}; }
  explicit QwenImageTransformer2DModelImpl(const QwenImageTransformerConfig& config,
                                           const at::TensorOptions& options = nn::default_options());

  /// The model's prediction, as diffusers' forward computes it for QwenImagePipeline's call
  ///   transformer(hidden_states, timestep=t / 1000, encoder_hidden_states_mask=mask,
  ///               encoder_hidden_states, img_shapes, txt_seq_lens=mask.sum(1).tolist()).
  /// - hidden_states [B, L_img, in_channels]: packed latents (2x2 patches of the latent channels).
  /// - encoder_hidden_states [B, L_txt, joint_attention_dim]: the prompts' hidden states, each
  ///   padded (the pipeline pads with zero rows) to L_txt, the longest in the batch.
  /// - encoder_hidden_states_mask [B, L_txt] (any integer or bool dtype, nonzero: a real token) or
  ///   undefined; used only with QwenTextPadding::kMasked.
  /// - timestep [B] or 0-d: the pipeline's t / 1000, in [0, 1]. Cast to the weights' dtype first,
  ///   as diffusers casts it (so bfloat16 rounds it), then projected with scale 1000.
  /// - img_shapes: per batch item, the token grids (frames, packed height, packed width) that make
  ///   up its L_img tokens, in order; Qwen-Image text-to-image passes {{1, H/16, W/16}} for each
  ///   item. diffusers reads only item 0's list, for every item, so all items must list the same.
  /// - txt_seq_lens: per batch item, its prompt's length (mask.sum(1)), each in [0, L_txt]. diffusers
  ///   uses only their maximum (the text RoPE rows taken), which must be L_txt.
  /// `cache` set: the blocks run under this step cache's state (nn/block_cache.h: First Block Cache or
  /// DBCache).
  /// Inputs are cast to the weights' dtype and device. Returns [B, L_img, patch_size^2 *
  /// out_channels] in the weights' dtype. There is no guidance input: diffusers 0.36.0 has no
  /// guidance embedder (its forward raises TypeError when given guidance), so guidance_embeds
  /// changes nothing here and a pipeline must pass none. Throws dpinfer::Error for inputs that do
  /// not fit (shapes, lengths, positions beyond the 4096-entry RoPE tables).
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& encoder_hidden_states_mask, const at::Tensor& timestep,
                     const std::vector<std::vector<nn::TokenGrid>>& img_shapes,
                     const std::vector<int64_t>& txt_seq_lens,
                     QwenTextPadding text_padding = QwenTextPadding::kAttended, nn::BlockCache* cache = nullptr);

  const QwenImageTransformerConfig& config() const { return config_; }

  /// QwenEmbedRope's theta, fixed in diffusers (not a config field).
  static constexpr double kRopeTheta = 10000.0;
  /// Timesteps' width and scale in QwenTimestepProjEmbeddings.
  static constexpr int64_t kTimestepChannels = 256;
  static constexpr double kTimestepScale = 1000.0;

 private:
  QwenImageTransformerConfig config_;
  nn::Linear img_in_{nullptr}, txt_in_{nullptr}, proj_out_{nullptr};
  nn::RMSNorm txt_norm_{nullptr};
  nn::TimestepEmbedding timestep_embedder_{nullptr};
  std::vector<QwenImageTransformerBlock> blocks_;
  nn::AdaLayerNormContinuous norm_out_{nullptr};
  nn::MSRope rope_;
};
TORCH_MODULE(QwenImageTransformer2DModel);

}  // namespace dpinfer::pipeline

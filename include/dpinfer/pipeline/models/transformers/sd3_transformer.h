#pragma once
// SD3's and SD3.5's denoiser: diffusers' SD3Transformer2DModel, an MMDiT. Image tokens (patches
// of the latents, with absolute sin-cos positions cropped from a square table) and text tokens
// (the CLIP and T5 prompt embeddings) keep their own weights in every block (AdaLN-Zero, QK norms,
// projections, GELU MLPs) and meet in one joint attention; SD3.5 adds a second, image-only
// attention to some blocks. The last block updates only the image stream.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/sd3_transformer_config.h"
#include "dpinfer/pipeline/nn/adaln.h"
#include "dpinfer/pipeline/nn/block_cache.h"
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/pipeline/nn/feed_forward.h"
#include "dpinfer/pipeline/nn/joint_attention.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// diffusers' PatchEmbed as SD3 builds it (pos_embed_max_size set, layer_norm False): proj, a
/// Conv2d(in, dim, patch, stride patch), then the latent's patches in row-major order plus the
/// centre crop of the pos_embed buffer [1, M * M, dim] (M = pos_embed_max_size, a persistent
/// buffer, so read from the checkpoint like a weight and cast to the run dtype with it, as
/// diffusers' default loading path does).
class SD3PatchEmbedImpl : public torch::nn::Module {
 public:
  SD3PatchEmbedImpl(int64_t in_channels, int64_t dim, int64_t patch_size, int64_t pos_embed_max_size,
                    const at::TensorOptions& options);

  /// latent [B, C, H, W] to tokens [B, (H/p)(W/p), dim] in the weights' dtype. Throws
  /// dpinfer::Error when H/p or W/p exceeds pos_embed_max_size, as diffusers raises.
  at::Tensor forward(const at::Tensor& latent);

 private:
  int64_t patch_size_, max_size_;
  nn::Conv2d proj_{nullptr};
  at::Tensor pos_embed_;
};
TORCH_MODULE(SD3PatchEmbed);

/// diffusers' JointTransformerBlock (models/attention.py) as SD3Transformer2DModel builds it:
/// per stream, AdaLN-Zero (norm1, norm1_context; the context_pre_only last block's
/// norm1_context is an AdaLayerNormContinuous), the joint attention (attn, [image, text], with
/// qk_norm "rms_norm" on SD3.5), LayerNorms norm2 / norm2_context and GELU-tanh MLPs ff /
/// ff_context; with use_dual_attention, norm1 is an SD35AdaLayerNormZeroX and attn2 attends the
/// image tokens alone.
class SD3JointTransformerBlockImpl : public torch::nn::Module {
 public:
  SD3JointTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, bool context_pre_only, bool qk_norm,
                               bool use_dual_attention, const at::TensorOptions& options);

  struct Output {
    at::Tensor image;  ///< [B, N_img, dim]
    at::Tensor text;   ///< [B, N_txt, dim]; undefined after the context_pre_only block
  };

  /// image [B, N_img, dim], text [B, N_txt, dim], temb [B, dim].
  Output forward(const at::Tensor& image, const at::Tensor& text, const at::Tensor& temb);

 private:
  bool context_pre_only_, dual_;
  nn::AdaLayerNormZero norm1_{nullptr}, norm1_context_{nullptr};
  nn::AdaLayerNormContinuous norm1_context_final_{nullptr};
  nn::DoubleStreamAttention attn_{nullptr};
  nn::JointAttention attn2_{nullptr};
  nn::LayerNorm norm2_{nullptr}, norm2_context_{nullptr};
  nn::FeedForward ff_{nullptr}, ff_context_{nullptr};
};
TORCH_MODULE(SD3JointTransformerBlock);

/// diffusers' SD3Transformer2DModel (models/transformers/transformer_sd3.py, 0.36.0). Children
/// carry diffusers' state_dict names: pos_embed (.proj, .pos_embed), time_text_embed
/// (.timestep_embedder.linear_1/2, .text_embedder.linear_1/2), context_embedder,
/// transformer_blocks, norm_out (.linear), proj_out. Parameters are allocated uninitialised
/// with `options`.
class SD3Transformer2DModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  /// --offload blocks (nn/offload.h): the block lists diffusers' group offloading matches, in forward order.
  std::vector<std::string> block_lists() const override { return {"transformer_blocks"}; }
  explicit SD3Transformer2DModelImpl(const SD3TransformerConfig& config,
                                     const at::TensorOptions& options = nn::default_options());

  /// The model's prediction, as diffusers' forward computes it for StableDiffusion3Pipeline's call
  ///   transformer(hidden_states, timestep=t.expand(B), encoder_hidden_states, pooled_projections).
  /// - hidden_states [B, in_channels, H, W]: latents, H and W multiples of patch_size, at most
  ///   pos_embed_max_size patches each.
  /// - encoder_hidden_states [B, L, joint_attention_dim]: the prompt embeddings.
  /// - pooled_projections [B, pooled_projection_dim].
  /// - timestep [B] or 0-d: the scheduler's timestep (sigma * 1000), projected in float32.
  /// - skip_layers: indices of transformer_blocks to leave out (diffusers' skip_layers, which SD3.5's
  ///   skip-layer guidance passes); an index past the last block skips nothing, as in diffusers.
  /// - cache: DBCache over transformer_blocks (cache-dit 1.5.3's SD3 adapter, Pattern_1), or null; not with
  ///   skip_layers. image_rows: which rows are which image (nn::ImageRows::rows), for a CFG batch; empty: row b is
  ///   image b.
  /// Inputs are cast to the weights' dtype and device. Returns [B, out_channels, H, W] in the
  /// weights' dtype. Throws dpinfer::Error for inputs that do not fit.
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& pooled_projections, const at::Tensor& timestep,
                     const std::vector<int64_t>& skip_layers = {}, nn::BlockCache* cache = nullptr,
                     const std::vector<std::vector<int64_t>>& image_rows = {});

  const SD3TransformerConfig& config() const { return config_; }

  /// Timesteps' width in CombinedTimestepTextProjEmbeddings (flip_sin_to_cos, shift 0, scale 1).
  static constexpr int64_t kTimestepChannels = 256;

 private:
  SD3TransformerConfig config_;
  SD3PatchEmbed pos_embed_{nullptr};
  nn::TimestepEmbedding timestep_embedder_{nullptr};
  nn::PixArtAlphaTextProjection text_embedder_{nullptr};
  nn::Linear context_embedder_{nullptr}, proj_out_{nullptr};
  std::vector<SD3JointTransformerBlock> blocks_;
  nn::AdaLayerNormContinuous norm_out_{nullptr};
};
TORCH_MODULE(SD3Transformer2DModel);

}  // namespace dpinfer::pipeline

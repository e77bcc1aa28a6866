#pragma once
// Z-Image's denoiser: diffusers' ZImageTransformer2DModel, a single-stream DiT. Image patches
// and caption features are refined apart (noise_refiner, with the timestep; context_refiner,
// without), then attend jointly through the main layers, each sequence padded to a multiple of
// 32 tokens with a learned pad token and placed on 3D RoPE positions (theta 256).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/models/transformers/z_image_transformer_config.h"
#include "dpinfer/pipeline/nn/adaln.h"
#include "dpinfer/pipeline/nn/block_cache.h"
#include "dpinfer/pipeline/nn/joint_attention.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/rms_norm.h"
#include "dpinfer/pipeline/nn/rope.h"
#include "dpinfer/pipeline/nn/swiglu.h"
#include "dpinfer/pipeline/nn/timestep_embedder.h"
#include "dpinfer/pipeline/nn/offload.h"

namespace dpinfer::pipeline {

/// diffusers' ZImageTransformerBlock: RMSNorm sandwiches around attention and a SwiGLU
/// feed-forward. Modulated (noise_refiner, layers): adaLN_modulation.0 gives scale_msa,
/// gate_msa, scale_mlp, gate_mlp; x += tanh(gate_msa) * attention_norm2(attn(attention_norm1(x)
/// * (1 + scale_msa))), the same for the feed-forward. Unmodulated (context_refiner): no scales
/// or gates and no adaLN_modulation.
class ZImageTransformerBlockImpl : public torch::nn::Module {
 public:
  ZImageTransformerBlockImpl(const ZImageTransformerConfig& config, bool modulation, const at::TensorOptions& options);

  /// x [B, N, dim], mask [B, N] bool (true: a real token), freqs complex64 [B, N, head_dim/2],
  /// adaln [B, min(dim, 256)] (modulated blocks only). Returns [B, N, dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask, const at::Tensor& freqs,
                     const at::Tensor& adaln = {});

 private:
  nn::JointAttention attention_{nullptr};
  nn::SwiGLUFeedForward feed_forward_{nullptr};
  nn::RMSNorm attention_norm1_{nullptr}, ffn_norm1_{nullptr}, attention_norm2_{nullptr}, ffn_norm2_{nullptr};
  nn::AdaLNModulation adaln_modulation_{nullptr};
};
TORCH_MODULE(ZImageTransformerBlock);

/// diffusers' Z-Image FinalLayer: LayerNorm (no affine, eps 1e-6), times 1 + adaLN_modulation
/// (SiLU, Linear) of the conditioning, then `linear` to the patch features.
class ZImageFinalLayerImpl : public torch::nn::Module {
 public:
  ZImageFinalLayerImpl(int64_t dim, int64_t adaln_dim, int64_t out_features, const at::TensorOptions& options);
  /// x [B, N, dim], c [B, adaln_dim] to [B, N, out_features].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& c);

 private:
  nn::LayerNorm norm_final_{nullptr};
  nn::Linear linear_{nullptr};
  nn::AdaLNModulation adaln_modulation_{nullptr};
};
TORCH_MODULE(ZImageFinalLayer);

/// diffusers' ZImageTransformer2DModel (models/transformers/transformer_z_image.py, 0.36.0).
/// Children carry diffusers' state_dict names: all_x_embedder.<p>-<pf>, all_final_layer.<p>-<pf>,
/// noise_refiner, context_refiner, t_embedder, cap_embedder (0: RMSNorm, 1: Linear), x_pad_token,
/// cap_pad_token, layers. Parameters are allocated uninitialised with `options`.
class ZImageTransformer2DModelImpl : public torch::nn::Module, public nn::OffloadableBlocks {
 public:
  /// --offload blocks (nn/offload.h): the block lists diffusers' group offloading matches, in forward order.
  std::vector<std::string> block_lists() const override { return {"noise_refiner", "context_refiner", "layers"}; }
  explicit ZImageTransformer2DModelImpl(const ZImageTransformerConfig& config,
                                        const at::TensorOptions& options = nn::default_options());

  /// The model's prediction for a batch, as diffusers' forward computes it for the lists
  ///   x = [latents[i] for i],  t = timestep,
  ///   cap_feats = [caption_features[i, :caption_lengths[i]] for i].
  /// latents [B, C, F, H, W], or [B, C, H, W] for one frame (diffusers' pipeline passes
  /// latents.unsqueeze(2)); all items have one size; F divisible by f_patch_size, H and W by
  /// patch_size. timestep [B] or 0-d, in [0, 1] as Z-Image's pipeline passes it ((1000 - t) / 1000),
  /// multiplied by t_scale here. caption_features [B, L, cap_feat_dim], item i's features in
  /// its first caption_lengths[i] rows (1 <= length <= L; the rest is ignored). Inputs are cast
  /// to the weights' dtype, as the pipeline casts them. Returns the weights' dtype, shaped as
  /// latents. Throws dpinfer::Error for inputs the model cannot take (a patch size it has no
  /// embedder for, positions beyond axes_lens).
  /// `cache`, when set, runs the main layers (cache-dit's Pattern_3 on `layers`) under a step cache, deciding per
  /// image: `image_rows` lists each image's rows of the batch (with CFG, image b has rows b and B + b), empty for
  /// one row per image.
  at::Tensor forward(const at::Tensor& latents, const at::Tensor& timestep, const at::Tensor& caption_features,
                     const std::vector<int64_t>& caption_lengths, int64_t patch_size = 2, int64_t f_patch_size = 1,
                     nn::BlockCache* cache = nullptr, const std::vector<std::vector<int64_t>>& image_rows = {});

  const ZImageTransformerConfig& config() const { return config_; }

  /// diffusers' SEQ_MULTI_OF: the image and caption sequences are each padded to a multiple of it.
  static constexpr int64_t kSeqMultipleOf = 32;

 private:
  ZImageTransformerConfig config_;
  std::map<std::string, nn::Linear> x_embedders_;
  std::map<std::string, ZImageFinalLayer> final_layers_;
  std::vector<ZImageTransformerBlock> noise_refiner_, context_refiner_, layers_;
  nn::DitTimestepEmbedder t_embedder_{nullptr};
  nn::RMSNorm cap_norm_{nullptr};
  nn::Linear cap_linear_{nullptr};
  at::Tensor x_pad_token_, cap_pad_token_;  // [1, dim]
  nn::AxialRope rope_;
};
TORCH_MODULE(ZImageTransformer2DModel);

}  // namespace dpinfer::pipeline

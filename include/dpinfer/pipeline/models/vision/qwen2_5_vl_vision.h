#pragma once
// transformers' Qwen2_5_VisionTransformerPretrainedModel (4.57.6), the vision tower of Qwen2.5-VL that
// Qwen-Image-Edit's text encoder runs on its input image: patches of the image processor's pixel_values
// (models/vision/qwen2_vl_image_processor.h) embedded by a Conv3d, blocks of windowed and full attention
// with 2D rotary positions, and a merger of spatial_merge_size^2 neighbouring patches into one token of
// the language model's width. Parameter names are the checkpoint's keys less their "visual." prefix.

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision_config.h"
#include "dpinfer/pipeline/nn/layers.h"

namespace dpinfer::pipeline {

/// Qwen2_5_VisionPatchEmbed: a Conv3d without bias whose kernel is its stride, so one patch row
/// [C * T * P * P] becomes one token [hidden]. proj.weight [hidden, C, T, P, P].
class Qwen2_5_VisionPatchEmbedImpl : public torch::nn::Module {
 public:
  Qwen2_5_VisionPatchEmbedImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);
  /// pixel_values [N, C * T * P * P] (any float dtype: cast to the weight's) to [N, hidden].
  at::Tensor forward(const at::Tensor& pixel_values) const;

  at::Tensor weight;  ///< proj.weight

 private:
  int64_t in_channels_, temporal_patch_size_, patch_size_, hidden_size_;
};
TORCH_MODULE(Qwen2_5_VisionPatchEmbed);

/// Qwen2_5_VLVisionAttention: qkv [3 hidden, hidden] and proj [hidden, hidden], both with bias.
class Qwen2_5_VLVisionAttentionImpl : public torch::nn::Module {
 public:
  Qwen2_5_VLVisionAttentionImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);
  /// x [L, hidden]; cos, sin [L, head_dim] float32; cu_seqlens the chunk bounds (0, ..., L): each chunk
  /// attends only within itself. Returns [L, hidden].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens) const;

 private:
  int64_t num_heads_, head_dim_;
  nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(Qwen2_5_VLVisionAttention);

/// Qwen2_5_VLMLP(bias=True): down_proj(act(gate_proj(x)) * up_proj(x)).
class Qwen2_5_VLVisionMLPImpl : public torch::nn::Module {
 public:
  Qwen2_5_VLVisionMLPImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x) const;

 private:
  std::string act_;
  nn::Linear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};
TORCH_MODULE(Qwen2_5_VLVisionMLP);

/// Qwen2_5_VLVisionBlock: x + attn(norm1(x)), then + mlp(norm2(x)); norm1, norm2 RMSNorm eps 1e-6.
class Qwen2_5_VLVisionBlockImpl : public torch::nn::Module {
 public:
  Qwen2_5_VLVisionBlockImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens) const;

 private:
  nn::LlamaRMSNorm norm1_{nullptr}, norm2_{nullptr};
  Qwen2_5_VLVisionAttention attn_{nullptr};
  Qwen2_5_VLVisionMLP mlp_{nullptr};
};
TORCH_MODULE(Qwen2_5_VLVisionBlock);

/// Qwen2_5_VLPatchMerger: ln_q (RMSNorm eps 1e-6 over hidden), spatial_merge_unit rows viewed as one,
/// then mlp.0 Linear, GELU (erf), mlp.2 Linear to out_hidden_size.
class Qwen2_5_VLPatchMergerImpl : public torch::nn::Module {
 public:
  Qwen2_5_VLPatchMergerImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);
  /// [N, hidden] to [N / spatial_merge_unit, out_hidden_size].
  at::Tensor forward(const at::Tensor& x) const;

 private:
  int64_t merged_width_;
  nn::LlamaRMSNorm ln_q_{nullptr};
  nn::Linear mlp_0_{nullptr}, mlp_2_{nullptr};
};
TORCH_MODULE(Qwen2_5_VLPatchMerger);

/// The grid of one image (or video) as the processor gives it: {t, h, w} in patches.
using GridThw = std::array<int64_t, 3>;

/// Qwen2_5_VisionTransformerPretrainedModel, run as transformers runs it with attn_implementation "sdpa"
/// (the default): attention per cu_seqlens chunk, so an image's tokens never see another image's.
class Qwen2_5_VisionTransformerImpl : public torch::nn::Module {
 public:
  Qwen2_5_VisionTransformerImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);

  /// pixel_values [N, C * T * P * P] (the images' rows one after another, as the processor gives them and
  /// concatenates them), grid_thw one {t, h, w} per image with sum(t * h * w) = N and h, w multiples of
  /// spatial_merge_size. Returns [N / spatial_merge_unit, out_hidden_size] in the module's dtype, each
  /// image's tokens in the processor's (merged raster) order. Throws InputError for shapes that do not fit.
  at::Tensor forward(const at::Tensor& pixel_values, const std::vector<GridThw>& grid_thw) const;

  const Qwen2_5_VLVisionConfig& config() const { return config_; }

  /// get_window_index for `grid_thw`: the merged-token order in which the blocks run (window after window,
  /// each window's merged tokens in raster order) and the windows' cumulative patch counts (0 first,
  /// repeated bounds of empty windows removed as torch.unique_consecutive removes them).
  std::pair<std::vector<int64_t>, std::vector<int64_t>> window_index(const std::vector<GridThw>& grid_thw) const;

 private:
  /// rot_pos_emb: [N, head_dim / 2] float32, each patch's (row, column) frequencies, in the processor's order.
  at::Tensor rotary_angles(const std::vector<GridThw>& grid_thw) const;

  Qwen2_5_VLVisionConfig config_;
  at::Tensor inv_freq_;  ///< [head_dim / 4] float32, on the module's device: not a parameter (non-persistent)
  Qwen2_5_VisionPatchEmbed patch_embed_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<Qwen2_5_VLVisionBlock> block_list_;
  Qwen2_5_VLPatchMerger merger_{nullptr};
};
TORCH_MODULE(Qwen2_5_VisionTransformer);

/// The vision tower of `text_encoder` (a Qwen2_5_VLForConditionalGeneration folder, Qwen-Image-Edit's
/// text_encoder): built from config["vision_config"] with `options` and filled from the component's
/// safetensors with its keys under "visual." (or "model.visual.", the layout later transformers save),
/// strictly: every such key used, every parameter filled, the text model's keys ("model.*", "lm_head.*")
/// skipped, any other key an error. Returns the module in eval mode. Throws dpinfer::Error naming the component.
/// The model-class table's name of the tower (models/model_classes.h): transformers' class of it. A family reads the
/// tower from its text_encoder component under this class (Qwen-Image-Edit).
inline constexpr const char* kQwen2_5_VLVisionClass = "Qwen2_5_VisionTransformerPretrainedModel";

/// Qwen2_5_VLForConditionalGeneration's vision tower as its checkpoint keys it: the tower under "visual", so that the
/// text encoder's files load into it strictly, the text model's keys skipped (qwen2_5_vl_vision_renames()).
class Qwen2_5_VLVisionModelImpl : public torch::nn::Module {
 public:
  Qwen2_5_VLVisionModelImpl(const Qwen2_5_VLVisionConfig& config, const at::TensorOptions& options);
  /// As Qwen2_5_VisionTransformerImpl::forward.
  at::Tensor forward(const at::Tensor& pixel_values, const std::vector<GridThw>& grid_thw) const {
    return visual_->forward(pixel_values, grid_thw);
  }
  const std::shared_ptr<Qwen2_5_VisionTransformerImpl>& tower() const { return visual_; }

 private:
  std::shared_ptr<Qwen2_5_VisionTransformerImpl> visual_;
};
TORCH_MODULE(Qwen2_5_VLVisionModel);

/// The model-class row's build: the tower of a Qwen2.5-VL config.json (its "vision_config"). Throws dpinfer::Error
/// naming the field for a config it does not implement.
std::shared_ptr<torch::nn::Module> build_qwen2_5_vl_vision(const nlohmann::json& text_encoder_config,
                                                           const at::TensorOptions& options);

/// How a Qwen2_5_VLForConditionalGeneration file's keys meet Qwen2_5_VLVisionModelImpl: "visual.*" (or
/// "model.visual.*") loaded, the text model's keys skipped, anything else unexpected.
const KeyRenames& qwen2_5_vl_vision_renames();

/// The tower of `text_encoder` (a Qwen2_5_VLForConditionalGeneration folder), built and loaded through the model-class
/// table under kQwen2_5_VLVisionClass. Throws InputError for a single-file component, Error for keys that do not fit.
std::shared_ptr<Qwen2_5_VisionTransformerImpl> load_qwen2_5_vl_vision(const Component& text_encoder,
                                                                      const at::TensorOptions& options);

}  // namespace dpinfer::pipeline

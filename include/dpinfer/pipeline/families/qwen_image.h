#pragma once
// The Qwen-Image family: diffusers' QwenImagePipeline (Qwen/Qwen-Image and its fine-tunes):
// a Qwen2.5-VL text encoder behind a fixed system prompt, the double-stream
// QwenImageTransformer2DModel on 2x2-packed latents, flow matching with dynamic shifting,
// true CFG with its norm rescale, and the causal-3D AutoencoderKLQwenImage for one frame.

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// The most pixels QwenImageEditPipeline gives its reference (the memory plan's bound):
/// calculate_dimensions(1024 * 1024, ratio) rounds each side to a multiple of 32, so a reference has
/// (sqrt(A r) + e_w)(sqrt(A / r) + e_h) pixels with |e| <= 16, at most 1024^2 + 16 (4096 + 256) + 256 for
/// aspect ratios up to 16:1; 1088^2 bounds that.
constexpr int64_t kQwenImageEditReferenceMaxPixels = 1088 * 1088;

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_qwen_image(const ModelDir& model, const LoadRequest& request, const Family& family);

/// Throws InputError when the transformer, text encoder and VAE configs do not fit one another
/// (the family's check_components; the load runs it too).
void check_qwen_image_components(const ModelDir& model);

/// The Edit classes' vision tower (QwenImageEditPipeline, QwenImageEditPlusPipeline): the text_encoder component
/// read as Qwen2_5_VisionTransformerPretrainedModel under the name "text_encoder.visual" (the family's
/// derived_components); none for the other classes, or a text encoder from a single file.
std::vector<Component> qwen_image_derived_components(const ModelDir& model);

/// The family's reference_facts: the Edit classes' each reference's VAE image at most
/// kQwenImageEditReferenceMaxPixels (the Plus pipeline's vision image is smaller), which sets an item's unset size;
/// none for the other classes (img2img's start adds no tokens).
ReferenceFacts qwen_image_reference_facts(const std::string& pipeline_class, const nlohmann::json& settings,
                                          int64_t item_pixels);

/// QwenImagePipeline's default size {height, width}: default_sample_size 128 times the VAE's
/// scale factor (1024 for Qwen-Image).
std::array<int64_t, 2> qwen_image_default_size(const ModelDir& model);

}  // namespace dpinfer::pipeline

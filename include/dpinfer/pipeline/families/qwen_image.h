#pragma once
// The Qwen-Image family: diffusers' QwenImagePipeline (Qwen/Qwen-Image and its fine-tunes):
// a Qwen2.5-VL text encoder behind a fixed system prompt, the double-stream
// QwenImageTransformer2DModel on 2x2-packed latents, flow matching with dynamic shifting,
// true CFG with its norm rescale, and the causal-3D AutoencoderKLQwenImage for one frame.

#include <array>
#include <cstdint>
#include <memory>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_qwen_image(const ModelDir& model, const LoadRequest& request, const Family& family);

/// Throws InputError when the transformer, text encoder and VAE configs do not fit one another
/// (the family's check_components; the load runs it too).
void check_qwen_image_components(const ModelDir& model);

/// QwenImagePipeline's default size {height, width}: default_sample_size 128 times the VAE's
/// scale factor (1024 for Qwen-Image).
std::array<int64_t, 2> qwen_image_default_size(const ModelDir& model);

}  // namespace dpinfer::pipeline

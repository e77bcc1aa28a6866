#pragma once
// The Z-Image family: diffusers' ZImagePipeline (Z-Image-Turbo, and Z-Image with classifier-free
// guidance), a Qwen3 text encoder, the single-stream ZImageTransformer2DModel, the 16-channel
// AutoencoderKL, and FlowMatchEulerDiscreteScheduler.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// The text ZImagePipeline._encode_prompt tokenizes for `prompt`: Qwen3's chat template applied to
/// one user turn with add_generation_prompt=True and enable_thinking=True,
/// "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n". The prompt goes in verbatim
/// (the template strips only assistant turns).
std::string z_image_chat_prompt(const std::string& prompt);

/// ZImagePipeline.__call__'s default size, {height, width}: 1024 x 1024 whatever the configs say, except
/// where the transformer's RoPE table (axes_lens) cannot place that many patches: then the largest size
/// it can, per side (diffusers fails there).
std::array<int64_t, 2> z_image_default_size(const ModelDir& model);

/// The family's check_components: the transformer's cap_feat_dim is the text encoder's
/// hidden_size, its in_channels the VAE's latent_channels, it has the (2, 1) patch embedder the
/// pipeline uses, the VAE has a shift_factor, and the chat tokens and padding are ids the text
/// encoder has. Throws InputError naming the mismatch.
void check_z_image_components(const ModelDir& model);

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_z_image(const ModelDir& model, const LoadRequest& request, const Family& family);

}  // namespace dpinfer::pipeline

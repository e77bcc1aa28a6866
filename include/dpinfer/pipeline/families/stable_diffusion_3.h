#pragma once
// The Stable Diffusion 3 family: diffusers' StableDiffusion3Pipeline (SD3 and SD3.5), two CLIP text
// encoders with projection (CLIP-L and CLIP-G), an optional T5 encoder, the MMDiT
// SD3Transformer2DModel, the 16-channel AutoencoderKL with shift_factor, and
// FlowMatchEulerDiscreteScheduler.

#include <array>
#include <cstdint>
#include <memory>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// StableDiffusion3Pipeline.__call__'s default size, {height, width}: the transformer's sample_size
/// times the VAE's scale factor (128 x 8 = 1024 for SD3 and SD3.5).
std::array<int64_t, 2> stable_diffusion_3_default_size(const ModelDir& model);

/// The family's check_components: the transformer's in_channels are the VAE's latent_channels, its
/// pooled_projection_dim is the two CLIPs' projection_dim together, the VAE has a shift_factor, the
/// CLIP tokenizers fit their encoders, and T5 is either absent (text_encoder_3 and tokenizer_3 both null:
/// zeros for its states, as diffusers) or complete, its d_model the transformer's joint_attention_dim and
/// its tokenizer within its vocabulary. Throws InputError naming the mismatch.
void check_stable_diffusion_3_components(const ModelDir& model);

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_stable_diffusion_3(const ModelDir& model, const LoadRequest& request,
                                                     const Family& family);

}  // namespace dpinfer::pipeline

#pragma once
// The FLUX.1 family: diffusers' FluxPipeline (FLUX.1-dev, FLUX.1-schnell and their fine-tunes): CLIP's
// pooled output and T5's hidden states, the FluxTransformer2DModel on 2x2-packed latents with RoPE on
// (0, row, column) ids, guidance as a distilled input (dev) or none (schnell), optional true CFG with a
// negative prompt, flow matching with dynamic (dev) or static (schnell) shifting, and the 16-channel
// AutoencoderKL with shift_factor.

#include <array>
#include <cstdint>
#include <memory>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// FluxPipeline.__call__'s default size {height, width}: default_sample_size 128 times the VAE's scale
/// factor (1024 for FLUX.1).
std::array<int64_t, 2> flux_default_size(const ModelDir& model);

/// The family's check_components: the transformer's joint_attention_dim is T5's d_model, its
/// pooled_projection_dim CLIP's hidden_size, its in_channels four times the VAE's latent_channels, the
/// VAE has a shift_factor, and the T5 tokenizer's ids fit T5's vocabulary. Throws InputError naming the
/// mismatch.
void check_flux_components(const ModelDir& model);

/// The most pixels FLUX.1 Kontext's auto_resize gives a reference: the largest of diffusers'
/// PREFERRED_KONTEXT_RESOLUTIONS (800 x 1328, about 1 MP).
int64_t kontext_reference_max_pixels();

/// The family's reference_facts: FluxKontextPipeline's reference, at most kontext_reference_max_pixels() with
/// auto_resize (its default), else the item's own pixels; none for the other classes.
ReferenceFacts flux_reference_facts(const std::string& pipeline_class, const nlohmann::json& settings,
                                    int64_t item_pixels);

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_flux(const ModelDir& model, const LoadRequest& request, const Family& family);

}  // namespace dpinfer::pipeline

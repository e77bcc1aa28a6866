#pragma once
// The FLUX.2 families: diffusers' Flux2KleinPipeline ([klein] 4B and 9B, step-distilled, and their Base
// models, which run CFG on the empty prompt; a Qwen3ForCausalLM whose hidden states 9, 18 and 27 of the
// chat-formatted prompt are stacked into the text tokens) and Flux2Pipeline ([dev]: Mistral Small 3.1's text
// model, hidden states 10, 20 and 30 of the prompt in its chat template with FLUX.2's system message, and the
// guidance scale as the transformer's guidance input). Both run the Flux2Transformer2DModel on 2x2-patchified
// latents with RoPE on (T, H, W, L) ids, flow matching with FLUX.2's empirical mu, and AutoencoderKLFlux2,
// whose batch-norm statistics unnormalise the latents before decoding; an item's images are references to edit.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// The text Flux2KleinPipeline._get_qwen3_prompt_embeds tokenizes for `prompt`: Qwen3's chat template on one
/// user turn with add_generation_prompt=True and enable_thinking=False,
/// "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n".
std::string flux2_klein_chat_prompt(const std::string& prompt);

/// The text Flux2Pipeline._get_mistral_3_small_prompt_embeds tokenizes for `prompt`: format_input's
/// conversation (the prompt with "[IMG]" removed, after FLUX.2's system message) in Mistral Small 3.1's chat
/// template, "<s>[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT][INST]{prompt}[/INST]".
std::string flux2_dev_chat_prompt(const std::string& prompt);

/// Flux2KleinPipeline.__call__'s cap on a reference's pixels (_resize_to_target_area's target, 1024^2): a larger
/// reference is resized to about this many.
constexpr int64_t kFlux2ReferenceMaxPixels = 1024 * 1024;

/// Flux2KleinPipeline.__call__'s default size {height, width}: default_sample_size 128 times the VAE's scale
/// factor (1024 for FLUX.2).
std::array<int64_t, 2> flux2_default_size(const ModelDir& model);

/// The families' check_components: the transformer's joint_attention_dim is 3 times the text encoder's
/// hidden_size, the text encoder has the layers the pipeline reads (27 or 30 and deeper), [dev]'s transformer
/// has its guidance embedding, the transformer's
/// in_channels are 4 times the VAE's latent_channels, and the chat tokens and the padding are ids the text
/// encoder has. Throws InputError naming the mismatch.
void check_flux2_components(const ModelDir& model);

/// The families' load function (families.cpp): [klein] or [dev] by model_index.json's class.
/// The families' reference_facts ([klein] and [dev]): each reference at most kFlux2ReferenceMaxPixels, and the first
/// sizes an item that sets no size.
ReferenceFacts flux2_reference_facts(const std::string& pipeline_class, const nlohmann::json& settings,
                                     int64_t item_pixels);

std::unique_ptr<TextToImage> load_flux2(const ModelDir& model, const LoadRequest& request, const Family& family);

}  // namespace dpinfer::pipeline

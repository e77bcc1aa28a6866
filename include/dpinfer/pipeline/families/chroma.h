#pragma once
// The Chroma family: diffusers' ChromaPipeline (Chroma1-HD, Chroma1-Base and their fine-tunes): T5 alone,
// encoded with its attention mask and passed on with all padding but one token masked, the
// ChromaTransformer2DModel (FLUX.1-schnell's blocks with the modulation approximator) on 2x2-packed
// latents with FLUX.1's RoPE ids, real classifier-free guidance on the negative prompt, flow matching
// with FLUX.1's dynamic shift, and the 16-channel AutoencoderKL with shift_factor.

#include <memory>

#include <ATen/ATen.h>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// ChromaPipeline._get_t5_prompt_embeds' text mask for the transformer: from the tokenizer's attention
/// mask [B, L] (1 for tokens, </s> included, 0 for padding), (arange(L) <= seq_len) in `dtype`, so that
/// the prompt's tokens and the first padding token are kept.
at::Tensor chroma_text_mask(const at::Tensor& tokenizer_mask, at::ScalarType dtype);

/// The family's check_components: the transformer's joint_attention_dim is T5's d_model, its
/// in_channels four times the VAE's latent_channels, the VAE has a shift_factor, and every id of the T5
/// tokenizer is a row of T5's embedding. Throws InputError naming the mismatch.
void check_chroma_components(const ModelDir& model);

/// The family's load function (families.cpp). ChromaPipeline's default size is FluxPipeline's
/// (flux_default_size).
std::unique_ptr<TextToImage> load_chroma(const ModelDir& model, const LoadRequest& request, const Family& family);

}  // namespace dpinfer::pipeline

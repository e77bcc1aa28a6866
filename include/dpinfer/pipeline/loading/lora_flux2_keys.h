#pragma once
// FLUX.2 LoRA files in Black Forest Labs' block names (ai-toolkit's and ComfyUI's "diffusion_model.<BFL name>",
// PEFT's "base_model.model.<BFL name>") onto the diffusers modules, without LibTorch, as diffusers 0.37 reads them:
// Flux2LoraLoaderMixin.lora_state_dict (loaders/lora_pipeline.py) renames "base_model.model." to
// "diffusion_model.", and a file with a "diffusion_model." key goes to _convert_non_diffusers_flux2_lora_to_diffusers
// (loaders/lora_conversion_utils.py), which
//  - strips that prefix from every key and renames lora_down / lora_up to lora_A / lora_B;
//  - double_blocks.<i>.{img,txt}_attn.qkv: transformer_blocks.<i>.attn.to_q, to_k, to_v (img) or add_q_proj,
//    add_k_proj, add_v_proj (txt), the lora_A factor copied to each, the lora_B factor split by rows into equal
//    thirds (LoraLayer::up_rows, split_block_diagonal off); {img,txt}_attn.proj: attn.to_out.0 / attn.to_add_out;
//    {img,txt}_mlp.0 / .2: ff(_context).linear_in / linear_out;
//  - single_blocks.<i>.linear1 / linear2: single_transformer_blocks.<i>.attn.to_qkv_mlp_proj / attn.to_out (FLUX.2's
//    single blocks keep BFL's fused projections);
//  - img_in, txt_in, time_in.{in,out}_layer, final_layer.linear, final_layer.adaLN_modulation.1 and the three
//    *_modulation*.lin: x_embedder, context_embedder, time_guidance_embed.timestep_embedder.linear_{1,2}, proj_out,
//    norm_out.linear, *.linear;
//  - fails ("`original_state_dict` should be empty") on any other key: alphas, DoRA scales, unknown layers.
// Flux2LoraLoaderMixin.load_lora_weights then refuses a file with a key without "lora" in it. With no alphas, PEFT's
// lora_alpha is the first lora_B factor's rank in the converter's order (get_peft_kwargs), which is the order
// these layers come in.

#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

/// Whether diffusers 0.37's Flux2LoraLoaderMixin converts a file with these keys from BFL's names: some key starts
/// with "diffusion_model." or "base_model.model.".
bool is_bfl_flux2_lora(const std::vector<LoraTensorKey>& keys);

/// The layers of such a file on `modules` (component "transformer"), in the converter's order. Throws InputError, one
/// line naming `file` and a key, for: a key without either prefix beside them, a key the converter does not know
/// (an alpha among them), a layer without both factors, factors that do not fit, or layers for modules the model
/// lacks.
std::vector<LoraLayer> map_bfl_flux2_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                               const LoraModelFacts& facts, const std::string& file);

}  // namespace dpinfer::pipeline

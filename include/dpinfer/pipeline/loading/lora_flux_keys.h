#pragma once
// FLUX.1's kohya / sd-scripts LoRA files (the civitai form) onto the diffusers modules, without
// LibTorch, as diffusers 0.36 reads them: FluxLoraLoaderMixin.lora_state_dict (loaders/lora_pipeline.py)
// sends any file with a ".lora_down.weight" key to _convert_kohya_flux_lora_to_diffusers
// (loaders/lora_conversion_utils.py), whose ComfyUI / sd-scripts branch is this one:
//  - "diffusion_model." becomes "lora_unet_", "text_encoders.clip_l.transformer." "lora_te_", and the
//    dots before lora_down / lora_up / alpha become '_' (_custom_replace);
//  - lora_unet_double_blocks_<i>_* and lora_unet_single_blocks_<i>_* are BFL's block names
//    (_convert_sd_scripts_to_ai_toolkit's table); the fused img_attn_qkv / txt_attn_qkv and linear1
//    split into their diffusers modules by rows of the up factor (LoraLayer::up_rows);
//  - every factor pair carries alpha / rank (scale_down * scale_up), and the adapter gets no alphas;
//  - lora_te_ layers are CLIP's (text_encoder), read through diffusers' old attention names, so the
//    q/k/v layers load only beside an out_proj layer (convert_state_dict_to_diffusers infers the
//    format from "to_out_lora");
//  - dropped, by diffusers too: lora_te1_ / lora_te2_ / lora_te3_ and T5 layers (only lora_unet_ and
//    lora_te_ keys pass), CLIP's position_embedding and text_projection, .diff_b and norm .diff keys,
//    and the embedders and final layer (img_in, txt_in, time_in, vector_in, guidance_in, final_layer:
//    converted without the "transformer." prefix, so load_lora_into_transformer never sees them).
// Files with "transformer." keys or diffusers' underscored names (lora_transformer_) take other
// branches of that function and are not read here: the first by map_lora_keys (lora_keys.cpp: the
// transformer. layers only, no alphas), the second by lora_flux_mixture_keys.h. XLabs files (no
// lora_down keys, "processor" in a key): lora_flux_xlabs_keys.h.

#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

/// Whether diffusers 0.36 converts a FLUX.1 file with these keys as a kohya / sd-scripts (or ComfyUI)
/// file: some key has ".lora_down.weight", none starts with "transformer." (has_peft_state_dict) and
/// none is diffusers' underscored kohya form (lora_transformer_ with lora_down, lora_up or alpha).
bool is_kohya_flux_lora(const std::vector<LoraTensorKey>& keys);

/// `layer` (its component, factor keys, alpha, rank and flags set; module unset) as the modules `modules`
/// (after `prefix`, e.g. "transformer_blocks.0.") of its component stacked: one LoraLayer per module, each
/// naming its rows of the up factor [sum of the modules' rows, r] when there are several (a fused BFL
/// projection, LoraLayer::up_rows), the down factor [r, in] shared. Empty when one of the modules is not a
/// Linear of `table`. Throws InputError (check_lora_factors_fit, naming `where` and the file's layer
/// `name`) when the factors `down` and `up` do not fit the stacked weights.
std::vector<LoraLayer> stacked_lora_layers(const LoraLayer& layer, const std::string& prefix,
                                           const std::vector<std::string>& modules, const LoraModuleTable& table,
                                           const std::vector<int64_t>& down, const std::vector<int64_t>& up,
                                           const std::string& where, const std::string& name);

/// The layers of such a file, on `modules` (components "transformer" and, for CLIP, "text_encoder"),
/// in the order diffusers lists them (the transformer's blocks in _convert_sd_scripts_to_ai_toolkit's
/// order, CLIP's in its named_modules order). Every layer has alpha_in_factors.
/// Throws InputError, one line naming `file`, for a key that is not a LoRA factor or names no module
/// of the model, an incomplete layer, factors that do not fit, or CLIP attention layers that diffusers
/// cannot read. `ignored`, when given, gets one line per kind of key dropped.
std::vector<LoraLayer> map_kohya_flux_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                                const LoraModelFacts& facts, const std::string& file,
                                                std::vector<std::string>* ignored);

}  // namespace dpinfer::pipeline

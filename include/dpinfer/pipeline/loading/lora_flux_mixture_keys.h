#pragma once
// FLUX.1 LoRA files in diffusers' module names with underscores for dots and kohya's factor names
// ("lora_transformer_single_transformer_blocks_0_attn_to_q.lora_down.weight", "lora_te1_text_model_..."),
// onto the diffusers modules, without LibTorch, as diffusers 0.36 reads them:
// FluxLoraLoaderMixin.lora_state_dict (loaders/lora_pipeline.py) sends a file with a ".lora_down.weight"
// key to _convert_kohya_flux_lora_to_diffusers (loaders/lora_conversion_utils.py), which, when no key
// starts with "transformer." (its has_peft_state_dict branch, tested first) and some lora_transformer_ key
// has lora_down, lora_up or alpha (has_mixture), converts it with _convert_mixture_state_dict_to_diffusers:
//  - every key not starting with lora_unet_ must start with lora_transformer_ or lora_te1_ (an assert);
//    each layer needs .lora_down.weight, .lora_up.weight and .alpha (KeyError without), and alpha / rank
//    goes into the factors (the scale_down / scale_up split of the kohya path: LoraLayer::alpha_in_factors,
//    the alpha tensor divided in its dtype: LoraLayer::alpha_divided_in_its_dtype), so the adapter gets no
//    alphas;
//  - lora_transformer_transformer_blocks_<i>_ and lora_transformer_single_transformer_blocks_<i>_ are those
//    blocks' attention projections: "attn_" with to_out_0, to_add_out, to_q/to_k/to_v or add_{q,k,v}_proj
//    (checked in that order, as substrings); a block layer without them names the block itself, which
//    diffusers cannot load (KeyError), so dpinfer refuses it; context_embedder, norm_out_linear, proj_out,
//    x_embedder and time_text_embed_{guidance,text,timestep}_embedder_linear_<i> are the top-level modules
//    (by prefix); any other lora_transformer_ name raises (NotImplementedError);
//  - lora_te1_text_model_encoder_layers_<i>_ is CLIP's (text_encoder) layer i: with "attn", the first of
//    q_proj, k_proj, v_proj, out_proj the name holds, else with "mlp" fc1 or fc2; any other lora_te1_ key
//    is left over and raises (ValueError);
//  - lora_unet_ keys are dropped when nothing else is left over.
// The converter lists the transformer's layers in a Python set's order, which changes from run to run:
// with layers of different ranks, PEFT's lora_alpha (the first layer's rank, get_peft_kwargs) and so the
// merged weights would too, so dpinfer refuses such a file; with one rank it is that rank (scaling 1).
// CLIP's layers are ranked in its named_modules order, as on every path.

#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

/// Whether diffusers 0.36 converts a FLUX.1 file with these keys as a mixture file: some key has
/// ".lora_down.weight", none starts with "transformer.", and some lora_transformer_ key has
/// "lora_down", "lora_up" or "alpha".
bool is_mixture_flux_lora(const std::vector<LoraTensorKey>& keys);

/// The layers of such a file on `modules` (components "transformer" and "text_encoder"). Every layer has
/// alpha_in_factors. Throws InputError, one line naming `file` and a key, for what diffusers raises on
/// (above), a layer that names no module of the model, factors that do not fit, and transformer layers of
/// different ranks. `ignored`, when given, gets one line for the lora_unet_ keys dropped.
std::vector<LoraLayer> map_mixture_flux_lora_keys(const std::vector<LoraTensorKey>& keys,
                                                  const LoraModuleTable& modules, const LoraModelFacts& facts,
                                                  const std::string& file, std::vector<std::string>* ignored);

}  // namespace dpinfer::pipeline

#pragma once
// XLabs' FLUX.1 LoRA files (XLabs-AI/flux-RealismLora, flux-lora-collection) onto the diffusers modules,
// without LibTorch, as diffusers 0.36 reads them: FluxLoraLoaderMixin.lora_state_dict
// (loaders/lora_pipeline.py) sends a file without ".lora_down.weight" keys (those are kohya's, tested
// first) that has "processor" in some key to _convert_xlabs_flux_lora_to_diffusers
// (loaders/lora_conversion_utils.py):
//  - [diffusion_model.]double_blocks.<i>.processor.<layer>.down.weight / .up.weight: proj_lora1 is
//    transformer_blocks.<i>.attn.to_out.0, proj_lora2 attn.to_add_out; qkv_lora1 is attn.to_q, to_k, to_v
//    and qkv_lora2 attn.add_q_proj, add_k_proj, add_v_proj (handle_qkv: the up factor [3 * inner, r] split
//    by rows into equal thirds, the down factor [r, in] copied to each, whatever the up factor's zeros:
//    LoraLayer::split_block_diagonal off);
//  - [diffusion_model.]single_blocks.<i>.processor.qkv_lora: single_transformer_blocks.<i>.attn.to_q, to_k,
//    to_v, the same way; proj_lora is proj_out, whose input (attention and MLP, [dim, dim + mlp]) is wider
//    than XLabs' down factor [r, dim]: FluxLoraLoaderMixin.load_lora_weights zero-pads that factor to
//    proj_out's width (_maybe_expand_lora_state_dict; LoraLayer::down_padded_to);
//  - no alphas ("xlabs doesn't use alpha"): PEFT's lora_alpha is the first layer's rank (get_peft_kwargs),
//    in the order the converter lists the lora_B factors (a fused layer's at its down key, the others' at
//    their up key, keys sorted);
//  - keys outside double_blocks / single_blocks are kept unconverted: diffusers then ignores them unless
//    they start with "transformer." or "text_encoder." (read as diffusers' names), which dpinfer refuses
//    beside XLabs layers; a layer without both factors makes diffusers fail (KeyError, or a key left over).

#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

/// Whether diffusers 0.36 converts a FLUX.1 file with these keys as an XLabs file: no key has
/// ".lora_down.weight" (a kohya file) and some key has "processor".
bool is_xlabs_flux_lora(const std::vector<LoraTensorKey>& keys);

/// The layers of such a file on `modules` (component "transformer"), in the order diffusers lists them.
/// Throws InputError, one line naming `file` and a key, for: a key in double_blocks / single_blocks that
/// is not an XLabs factor, a layer without its down or up factor, the same layer twice (with and without
/// "diffusion_model."), factors that do not fit (a down factor wider than its weight's input among them), diffusers-named
/// keys beside the XLabs ones, or layers for blocks the model lacks. `ignored`, when given, gets one line
/// for the other keys, which diffusers ignores too.
std::vector<LoraLayer> map_xlabs_flux_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                                const LoraModelFacts& facts, const std::string& file,
                                                std::vector<std::string>* ignored);

}  // namespace dpinfer::pipeline

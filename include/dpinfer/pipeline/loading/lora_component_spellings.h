#pragma once
// Which mixes of key spellings diffusers 0.36 loads per component of a file in diffusers' names
// ("unet.", "transformer.", "text_encoder.", "text_encoder_2."), without LibTorch.
//
// The denoiser's keys go to peft.py's load_lora_adapter, which respells them (convert_unet_state_dict_to_peft:
// .lora.down -> .lora_A, processor.to_q_lora.down -> to_q.lora_A, ...) only when its *first* key has no "lora_A":
// a file whose first denoiser key (safetensors' sorted order) is PEFT's leaves its other spellings unread.
//
// Every family's loader hands a text encoder's keys to lora_base.py's _load_lora_into_text_encoder, which
// respells them twice (utils/state_dict_utils.py): convert_state_dict_to_diffusers, then
// convert_state_dict_to_peft. Each guesses the spelling of the whole encoder from one key: a "to_out_lora"
// key (the old patched attention), a ".lora_A.weight" key (PEFT; the first step only) or a
// "lora_linear_layer" key (DreamBooth's scripts), and each raises "Could not automatically infer state dict
// type" when none is there. So an encoder whose keys are all ".lora.down.weight" fails (no trainer wrote
// those for a text encoder: diffusers 0.19-0.21 saved them as lora_linear_layer, kohya as lora_te_), and so
// does one in PEFT's names with no q/k/v/out_proj layer (PEFT_TO_DIFFUSERS renames only those, so the
// second step finds no lora_linear_layer key); and in an encoder that mixes spellings the keys the guessed
// spelling's table does not rename stay as they are, and PEFT drops them as unexpected keys.

#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

/// Throws InputError, one line naming `file`, the component and its first offending key, when diffusers 0.36
/// would fail on one of `components`' text encoders in `keys` ("Could not automatically infer state dict type")
/// or drop some of its layers (keys its respelling leaves outside PEFT's lora_A / lora_B names). Looks only at
/// keys that start with "<component>." for a component named "text_encoder*"; ".alpha" and "dora_scale" keys
/// are left to the other checks.
void check_text_encoder_spellings(const std::vector<LoraTensorKey>& keys, const std::vector<std::string>& components,
                                  const std::string& file);

/// Throws InputError, one line naming `file`, when the first key of `denoiser` ("unet", "transformer") in `keys`
/// has "lora_A" and another of its keys is in one of diffusers' older spellings (.lora.down / .lora.up, an attention
/// processor's to_q_lora...), which load_lora_adapter then leaves unread.
void check_denoiser_spellings(const std::vector<LoraTensorKey>& keys, const std::string& denoiser,
                              const std::string& file);

/// Throws InputError, one line naming `file`, when a kohya text encoder (lora_te_ / lora_te1_ keys, lora_te2_ keys) is one
/// that diffusers 0.36 fails on or drops layers of: _convert_text_encoder_lora_key names its attention projections
/// "self_attn.to_q_lora.down.weight" ..., its MLP "mlp.fc1.lora_linear_layer.down.weight", anything else
/// "<module>.lora.down.weight", and _load_lora_into_text_encoder's respellings (above) then read q/k/v only beside an
/// out_proj layer (its "to_out_lora" key), and fail when neither that nor an MLP layer is there.
void check_kohya_text_encoder_spellings(const std::vector<LoraTensorKey>& keys, const std::string& file);

/// The key of a text encoder (its "<component>." prefix removed) as diffusers 0.36's two respellings leave it,
/// or "" where they raise: for tests and `dpinfer inspect`'s nearest spelling.
std::vector<std::string> diffusers_text_encoder_respelling(const std::vector<std::string>& encoder_keys);

}  // namespace dpinfer::pipeline

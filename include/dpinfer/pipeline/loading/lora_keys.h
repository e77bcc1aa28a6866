#pragma once
// Which weight of a model each layer of a LoRA file changes: the key conversion, without
// LibTorch (tests/fuzz/fuzz_lora_keys.cpp fuzzes it). It reads key names and shapes only.
//
// Formats (the names diffusers 0.36 accepts, loaders/lora_pipeline.py lora_state_dict):
//  - kohya / A1111 (sd-scripts, and LyCORIS LoCon, which adds convolutions in the same keys):
//    "<prefix><module with '_' for '.'>.lora_down.weight", ".lora_up.weight", ".alpha", where the
//    prefix is lora_unet_, lora_te_ or lora_te1_ (text_encoder), lora_te2_ (text_encoder_2).
//    The module is found by its underscored name among the model's own (A1111's and
//    ComfyUI's way, equivalent to diffusers' _convert_unet_lora_key / _convert_text_encoder_lora_key
//    string rewrites for every key those accept). UNet modules may use the original (SGM/LDM)
//    block names, input_blocks_<i>_<j>_, middle_block_<i>_, output_blocks_<i>_<j>_, with the
//    ResBlock names in_layers_2, out_layers_3, emb_layers_1, skip_connection and op: mapped
//    as diffusers' _maybe_map_sgm_blocks_to_diffusers does (lora_conversion_utils.py).
//  - diffusers / PEFT: "<component>.<module>.lora_A.weight" / ".lora_B.weight" (also the
//    older ".lora.down.weight" / ".lora.up.weight"), component unet, text_encoder,
//    text_encoder_2 or transformer; an optional "<component>.<module>.alpha".
// Not read (refused by name): LoHa (hada_), LoKr (lokr_), DoRA (dora_scale), and the Tucker
// "lora_mid" of LoCon's CP decomposition.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// What a LoRA may change: component ("unet") -> module ("down_blocks.0.attentions.0.proj_in")
/// -> the shape of its weight ([out, in] for a Linear, [out, in, kh, kw] for a Conv2d).
using LoraModuleTable = std::map<std::string, std::map<std::string, std::vector<int64_t>>>;

/// One tensor of a LoRA file, as its header gives it.
struct LoraTensorKey {
  std::string key;
  std::vector<int64_t> shape;
};

/// One layer of a LoRA: the weight it changes and the file keys of its factors.
struct LoraLayer {
  std::string component;  ///< "unet", "text_encoder", "text_encoder_2"
  std::string module;     ///< the module's name in the component; its weight is "<module>.weight"
  std::string down_key;   ///< A (PEFT) / lora_down (kohya): [r, in] or [r, in, kh, kw]
  std::string up_key;     ///< B / lora_up: [out, r] or [out, r, 1, 1]
  std::optional<std::string> alpha_key;  ///< a 0-d or 1-element tensor; none: alpha = rank
  int64_t rank = 0;
};

/// What the model's structure adds to the key conversion.
struct LoraModelFacts {
  std::string family_label;  ///< for messages: "Stable Diffusion XL"
  int64_t layers_per_block = 2;  ///< the UNet's, for the SGM block numbers
};

/// The layers of a LoRA file named `file` (for messages) with the tensors `keys`, mapped onto
/// `modules`. Throws InputError, one line naming the file, when: a key belongs to a format
/// dpinfer does not read; no layer matches a module of the model (a LoRA for another model
/// or family: says which prefixes the file has); only some layers match ("12 of 30 layers
/// match ..., e.g. <key> matches nothing"); a down key has no up key or the reverse; or the
/// factors' shapes do not fit the weight.
std::vector<LoraLayer> map_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                     const LoraModelFacts& facts, const std::string& file);

}  // namespace dpinfer::pipeline

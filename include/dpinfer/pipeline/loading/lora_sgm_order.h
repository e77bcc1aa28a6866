#pragma once
// The order in which diffusers 0.36 lists the layers of a kohya UNet LoRA in the original (SGM/LDM) block
// names (lora_unet_input_blocks_<i>_..., middle_block_<i>_, output_blocks_<i>_), which decides the LoraConfig
// it infers (get_peft_kwargs: the first layer's rank, the first of tied alphas; lora_adapter_metadata.h).
// Names only, free of LibTorch (fuzzed with lora_keys.h by tests/fuzz/fuzz_lora_keys.cpp).
//
// Ref: diffusers 0.36 loaders/lora_conversion_utils.py _maybe_map_sgm_blocks_to_diffusers, which
// StableDiffusionXLLoraLoaderMixin.lora_state_dict calls before _convert_non_diffusers_lora_to_diffusers (whose
// order the converted layers keep). It rebuilds the state dict as: the keys with "text" in them, in the file's
// order; then input blocks, the middle block and output blocks, each kind's block numbers in the order a Python
// set of them iterates, and each block's keys in the file's order. A Python set of small ints does not iterate
// in numeric order: the set {4, 5, 7, 8} of SDXL's attention input blocks iterates 8, 4, 5, 7 (CPython's
// 8-slot table puts 8 at slot 0), so diffusers' first SDXL UNet layer is one of input block 8's.

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// The order in which CPython 3.11 (the fixture venv's; Objects/setobject.c, unchanged in this since 3.7)
/// iterates a set of non-negative ints (hash(i) == i) built by adding `added` in turn: its hash table's slots
/// in order (8 to start with, linear probing, then perturbation; resized to the next power of two above
/// 4 * used once 5 * fill >= 3 * mask).
std::vector<int64_t> python_int_set_order(const std::vector<int64_t>& added);

/// The keys of a kohya UNet-family file (`keys`, every one lora_unet_/lora_te*_) that diffusers 0.36 drops: where
/// some key is in the original block names and another in diffusers' (down_blocks, mid_block, up_blocks), the
/// former. SDXL's loader pops them (_maybe_map_sgm_blocks_to_diffusers); SD 1.x/2.x's keeps their names, which
/// match no module, so PEFT leaves them out of the model ("unexpected keys"). Empty otherwise.
std::vector<std::string> sgm_keys_dropped(const std::vector<std::string>& keys);

/// `keys` (a LoRA file's, in the file's order: sorted, as safetensors lists them) in the order of the state dict
/// _maybe_map_sgm_blocks_to_diffusers builds from them, or empty where it leaves the file as it is (no key in
/// the original block names) or drops those keys (sgm_keys_dropped). A key that
/// function would fail on (lora_unet_time_embed_0, ...: no block number in its fifth '_' field) comes last.
std::vector<std::string> sgm_mapped_key_order(const std::vector<std::string>& keys);

}  // namespace dpinfer::pipeline

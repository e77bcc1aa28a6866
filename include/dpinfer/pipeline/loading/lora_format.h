#pragma once
// What a LoRA file's key names and shapes tell about it, without a model and without LibTorch:
// which of map_lora_keys' converters reads it (its dispatch, lora_keys.h), which family's names it
// uses, its layers per component and their ranks. `dpinfer inspect` prints it (lora_inspect.h);
// tests/unit/test_lora_format.cpp and tests/fuzz/fuzz_lora_keys.cpp test it.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

/// The converter map_lora_keys picks for `keys` under a family's `rules`, in its dispatch order:
/// "kohya / ComfyUI FLUX.1 (BFL block names)", "FLUX.1 in diffusers' underscored names (lora_transformer_)",
/// "XLabs FLUX.1", "Qwen-Image / Z-Image original names", "kohya / A1111", "kohya LoCon" (a kohya file with
/// a convolution of kernel > 1), "diffusers / PEFT". A format dpinfer does not read is named as such.
std::string lora_format(const std::vector<LoraTensorKey>& keys, const LoraKeyRules& rules);

/// The layers of one component, as the file's names group them.
struct LoraNamedComponent {
  int64_t layers = 0;
  int64_t min_rank = 0, max_rank = 0;
};

/// What the names (and the factors' shapes) of a LoRA file say without a model.
struct LoraNameFacts {
  std::string format;  ///< as lora_format() names it, guessed from the names alone
  /// The families whose names the file uses, as phrases: "SDXL (lora_te1_/lora_te2_ names)". A guess.
  std::vector<std::string> families;
  /// By the component its key prefix names ("unet", "text_encoder", "transformer"; kohya's lora_unet_ of
  /// a FLUX.1 file is the transformer): layers with a down factor, and their ranks.
  std::map<std::string, LoraNamedComponent> components;
  bool has_alphas = false;  ///< some ".alpha" tensor
};

/// Describes `keys` (a LoRA file's tensors) from their names and shapes.
LoraNameFacts describe_lora_names(const std::vector<LoraTensorKey>& keys);

/// "rank 16" or "ranks 4-32".
std::string rank_text(int64_t min_rank, int64_t max_rank);

}  // namespace dpinfer::pipeline

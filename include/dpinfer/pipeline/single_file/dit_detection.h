#pragma once
// Which DiT transformer a single file is, from its tensors' names and shapes (the probe keys of
// diffusers 0.36.0's loaders/single_file_utils.py CHECKPOINT_KEY_NAMES and
// infer_diffusers_model_type). These files hold the transformer only. Reads no tensor; free of
// LibTorch, so it is fuzzed.

#include <optional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/tensor_parts.h"
#include "dpinfer/pipeline/single_file/ldm_keys.h"

namespace dpinfer::pipeline {

/// What the probe keys say a DiT transformer file is.
struct DitDetection {
  std::string kind;        ///< "flux-dev", "flux-schnell", "qwen-image", "z-image-turbo"
  std::string label;       ///< "FLUX.1 [dev]", ..., "Qwen-Image", "Z-Image"
  std::string prefix;      ///< where its keys start: "" (as its makers ship it) or "model.diffusion_model." (ComfyUI)
  CheckpointLayout layout = CheckpointLayout::kFluxBfl;
};

/// Detects a DiT transformer file: FLUX.1 in Black Forest Labs' layout (probe
/// double_blocks.0.img_attn.norm.key_norm.scale; dev when it has guidance_in, else schnell), and
/// Qwen-Image as ComfyUI splits it (qwen_image_bf16.safetensors: diffusers' own names, probes
/// transformer_blocks.0.img_mod.1.weight and txt_norm.weight), and Z-Image in its original layout
/// (probes cap_embedder.0.weight, layers.0.attention.qkv.weight and layers.0.adaLN_modulation.0.weight;
/// Lumina 2's original blocks have adaLN_modulation.1). Returns nullopt for a file of none of these families. Throws InputError (one line naming
/// the file) for the kinds dpinfer refuses: FLUX.1 Fill and Depth (img_in takes 384 / 128
/// channels) and FLUX.2.
std::optional<DitDetection> detect_dit_checkpoint(const std::vector<SourceTensor>& tensors, const std::string& file);

/// "FLUX.1 [dev]", "FLUX.1 [schnell]", "Qwen-Image", "Z-Image" for a kind detect_dit_checkpoint() gives; nullptr for any other.
const char* dit_kind_label(const std::string& kind);

}  // namespace dpinfer::pipeline

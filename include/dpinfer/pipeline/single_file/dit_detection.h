#pragma once
// Which DiT transformer a single file is, from its tensors' names and shapes (the probe keys of
// diffusers 0.36.0's loaders/single_file_utils.py CHECKPOINT_KEY_NAMES and
// infer_diffusers_model_type). These files hold the transformer only, but for SD3 / SD3.5's, which may
// hold the VAE and text encoders too. Reads no tensor; free of LibTorch, so it is fuzzed.

#include <optional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/ldm_keys.h"
#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// What the probe keys say a DiT transformer file is.
struct DitDetection {
  std::string kind;        ///< "flux-dev", "flux-schnell", "chroma", "qwen-image", "z-image-turbo", "sd3", "flux2-dev"
  std::string label;       ///< "FLUX.1 [dev]", ..., "Chroma", "Qwen-Image", "Z-Image", "Stable Diffusion 3", "FLUX.2 [dev]"
  /// SD3: diffusers' model type when its probes tell it ("SD3 medium", "SD3.5 medium", "SD3.5 large"), else empty.
  std::string variant;
  std::string prefix;      ///< where its keys start: "" (as its makers ship it) or "model.diffusion_model." (ComfyUI)
  CheckpointLayout layout = CheckpointLayout::kFluxBfl;
};

/// Detects a DiT transformer file: FLUX.1 in Black Forest Labs' layout (probe
/// double_blocks.0.img_attn.norm.key_norm.scale; dev when it has guidance_in, else schnell), and
/// Qwen-Image as ComfyUI splits it (qwen_image_bf16.safetensors: diffusers' own names, probes
/// transformer_blocks.0.img_mod.1.weight and txt_norm.weight), and Z-Image in its original layout
/// (probes cap_embedder.0.weight, layers.0.attention.qkv.weight and layers.0.adaLN_modulation.0.weight;
/// Lumina 2's original blocks have adaLN_modulation.1), and Chroma in BFL layout (FLUX.1's probe with
/// distilled_guidance_layer.in_proj.weight), and SD3 / SD3.5 MMDiT files (probe
/// joint_blocks.0.context_block.adaLN_modulation.1.bias; variant from its width 9216 and pos_embed's
/// 36864 / 147456 rows, or joint_blocks.37, as infer_diffusers_model_type tells sd3 / sd35_medium /
/// sd35_large), and FLUX.2 in BFL's layout (probe single_stream_modulation.lin.weight; [dev] with
/// guidance_in, [klein] without). Returns nullopt for a file of none of these families. Throws InputError
/// (one line naming the file) for the kind dpinfer refuses: FLUX.1 Depth (img_in takes 128 channels).
std::optional<DitDetection> detect_dit_checkpoint(const std::vector<SourceTensor>& tensors, const std::string& file);

}  // namespace dpinfer::pipeline

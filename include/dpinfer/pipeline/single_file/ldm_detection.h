#pragma once
// Which Stable Diffusion checkpoint a single file is, from its tensors' names and shapes (the
// probe keys of diffusers' loaders/single_file_utils.py CHECKPOINT_KEY_NAMES and
// infer_diffusers_model_type). Reads no tensor; free of LibTorch, so it is fuzzed.

#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// What the probe keys say a checkpoint is.
struct LdmDetection {
  std::string kind;     ///< "sd1", "sd2", "sdxl"; empty when the UNet alone cannot tell (then --base decides)
  std::string label;    ///< "Stable Diffusion 1.x", ...
  std::string variant;  ///< beyond the family (SD 2.x's prediction type), or empty
};

/// Detects the family of the checkpoint `file` from its tensors' names and shapes. Throws
/// InputError (one line naming the file) for a checkpoint of no known family (listing the
/// probe keys looked for and the key prefixes found) and for the kinds dpinfer refuses
/// (inpainting, SDXL refiner, Lumina 2 original files, MMDiT files without SD3's probe; FLUX.1 BFL,
/// Chroma, SD3, Qwen-Image and Z-Image
/// files are detect_dit_checkpoint()'s).
LdmDetection detect_ldm_checkpoint(const std::vector<SourceTensor>& tensors, const std::string& file);

}  // namespace dpinfer::pipeline

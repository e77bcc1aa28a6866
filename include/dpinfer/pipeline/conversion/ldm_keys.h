#pragma once
// The key conversion of Stable Diffusion's original single-file checkpoints (the "LDM"
// layout of CompVis' latent-diffusion code, which A1111 and ComfyUI load) into the
// diffusers / transformers names dpinfer's modules use. Rename tables plus a few
// structural rules, as diffusers' loaders/single_file_utils.py converts them
// (convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint, convert_ldm_clip_checkpoint,
// convert_open_clip_checkpoint). Names and shapes only: no tensor is read here, and a
// fused tensor is split into row ranges of the file (TensorPart), never copied.

#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::pipeline {

/// How one component is laid out inside a single-file checkpoint.
enum class CheckpointLayout {
  kLdmUNet,           ///< openaimodel.UNetModel: input_blocks / middle_block / output_blocks
  kLdmVae,            ///< ldm AutoencoderKL: encoder.down.N.block.M, mid.attn_1 as 1x1 convs
  kTransformersClip,  ///< a transformers CLIPTextModel under a prefix (SD 1.x, SDXL's first)
  kOpenClip,          ///< open_clip's text tower: resblocks, fused attn.in_proj, text_projection [in, out]
  kFluxBfl,           ///< Black Forest Labs' FLUX.1 transformer (conversion/flux_bfl_keys.h)
  /// the module's own diffusers/transformers names, under a prefix or none (ComfyUI's Qwen-Image
  /// files, an SD3 file's T5)
  kDiffusersNames,
  kZImageOriginal,    ///< Z-Image's original transformer (conversion/z_image_keys.h)
  kSd3Mmdit,          ///< Stability AI's SD3 / SD3.5 MMDiT (conversion/sd3_keys.h)
  /// SD3's CLIP-L in a Stability file (text_encoders.clip_l.transformer.*): transformers names, but
  /// its text_projection is the identity, as diffusers' create_diffusers_clip_model_from_ldm sets it
  /// for such a file (whatever the file holds there).
  kSd3ClipL,
  kFlux2Bfl,          ///< Black Forest Labs' FLUX.2 transformer (conversion/flux2_bfl_keys.h)
};

/// "LDM UNet", "LDM VAE", "transformers CLIP", "OpenCLIP", "BFL FLUX.1", "diffusers names",
/// "Z-Image original", "SD3 MMDiT", "SD3 CLIP-L", "BFL FLUX.2".
const char* layout_name(CheckpointLayout layout);

/// What the conversion needs to know of the module the keys go to (from its config).
struct LayoutShape {
  int64_t unet_layers_per_block = 2;  ///< LDM num_res_blocks: resnets per down level
  int64_t vae_levels = 4;             ///< len(block_out_channels): decoder levels are counted bottom-up
  int64_t text_layers = 12;           ///< the text encoder's num_hidden_layers; open_clip layers past it are dropped
  bool text_projection = false;       ///< the text encoder has text_projection (CLIPTextModelWithProjection)
};

/// The parts of `tensors` whose names start with `prefix`, under the module's names (for
/// kDiffusersNames, the names without the prefix, whole);
/// tensors outside `prefix` get none. A key the rules do not know keeps its name without
/// the prefix, for the strict loader to report as unexpected. Throws InputError (one line
/// naming the key) for a tensor a rule needs of another shape: an in_proj whose rows do
/// not split in three, an attention projection that is not [C, C] or [C, C, 1, 1].
std::vector<TensorPart> convert_ldm_keys(CheckpointLayout layout, const std::string& prefix, const LayoutShape& shape,
                                         const std::vector<SourceTensor>& tensors);

}  // namespace dpinfer::pipeline

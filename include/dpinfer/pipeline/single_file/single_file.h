#pragma once
// Single-file checkpoints (`--model FILE.safetensors`): Stable Diffusion 1.x, 2.x and SDXL
// in the original LDM layout, as A1111 and ComfyUI load them; SD3 / SD3.5 files as Stability AI
// ships them; FLUX.1, Chroma, Qwen-Image and Z-Image transformer files (dit_detection.h). The family is detected from
// probe keys (as diffusers' loaders/single_file_utils.py infer_diffusers_model_type does),
// the configs, tokenizers and scheduler come from a base (--base, or the default shipped in
// configs/single_file/), and each component's weights from the file, or, when the file
// lacks them, from --text-encoder / --text-encoder-2 / --vae or the base.

#include <string>
#include <vector>

#include "dpinfer/pipeline/single_file/ldm_detection.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// Resolves the single-file checkpoint `path` into a ModelDir whose components' configs come
/// from the base and whose weights come from the file where it has them (Component::single_file).
/// Pickled checkpoints (.ckpt, .pt, .pth, .bin) and files that are not safetensors are refused
/// with one line. A component neither the file, nor its option, nor the base has is an
/// error naming it and how to supply it (collected in `errors` when given, as resolve_model()).
ModelDir resolve_single_file(const std::string& path, const SingleFileOptions& options,
                             std::vector<ModelDirError>* errors = nullptr);

/// The folder of dpinfer's shipped default configs for `kind` ("sd1", "sd2", "sdxl", "flux-dev", ...):
/// $DPINFER_DATA_DIR/configs/single_file/<kind>, else beside the binaries
/// (<exe>/../share/dpinfer/configs in the build tree, DATADIR/dpinfer/configs once installed).
/// Throws InputError naming the places looked at.
std::string shipped_config_dir(const std::string& kind);

/// Every kind of single file dpinfer reads ("sd1", "sd2", "sdxl", "sd3", "flux-dev", "flux-schnell",
/// "chroma", "qwen-image", "z-image-turbo"), for the generated model table.
const std::vector<std::string>& single_file_kinds();

/// The family table's pipeline class that runs files of `kind` ("FluxPipeline" for "flux-dev").
std::string single_file_pipeline_class(const std::string& kind);

/// Whether dpinfer ships a base for `kind` (configs/single_file/<kind>): not for SD3 and Chroma,
/// whose T5 vocabulary cannot ship, so their files need --base.
bool single_file_kind_has_shipped_base(const std::string& kind);

/// "Stable Diffusion 1.x", "FLUX.1 [dev]", ... for a kind; "Stable Diffusion (UNet only)" for none (an LDM UNet whose
/// keys do not tell its family).
std::string single_file_kind_label(const std::string& kind);

}  // namespace dpinfer::pipeline

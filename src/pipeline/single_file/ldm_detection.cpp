#include "dpinfer/pipeline/single_file/ldm_detection.h"

#include "dpinfer/pipeline/single_file/single_file.h"

#include <algorithm>
#include <map>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kLdmUNetPrefix = "model.diffusion_model.";

bool any_tensor_starts_with(const std::vector<SourceTensor>& tensors, const std::string& prefix) {
  return std::any_of(tensors.begin(), tensors.end(), [&](const SourceTensor& t) { return starts_with(t.name, prefix); });
}

/// "model.diffusion_model.*, first_stage_model.*": the first two dotted parts of the keys, counted.
std::string prefixes_found(const std::vector<SourceTensor>& tensors) {
  std::map<std::string, size_t> counts;
  for (const SourceTensor& t : tensors) {
    size_t dot = t.name.find('.');
    if (dot != std::string::npos && t.name.find('.', dot + 1) != std::string::npos &&
        (starts_with(t.name, "model.") || starts_with(t.name, "cond")))
      dot = t.name.find('.', dot + 1);
    ++counts[printable(t.name.substr(0, dot), 60) + (dot == std::string::npos ? "" : ".*")];
  }
  std::vector<std::string> items;
  for (const auto& [prefix, n] : counts) items.push_back(prefix + " (" + std::to_string(n) + ")");
  return items.empty() ? "no tensors at all" : join_limited(items, 8);
}

/// A key of a LoRA file (kohya's, PEFT's, LyCORIS'), which a user may pass as --model by mistake;
/// nullptr when there is none.
const SourceTensor* lora_key(const std::vector<SourceTensor>& tensors) {
  static const char* const kPieces[] = {".lora_A.", ".lora_B.", ".lora_down.", ".lora_up.", ".lora.down.",
                                        ".lora.up.", ".hada_w1_a", ".lokr_w1"};
  for (const SourceTensor& t : tensors)
    for (const char* piece : kPieces)
      if (t.name.find(piece) != std::string::npos) return &t;
  return nullptr;
}

}  // namespace

LdmDetection detect_ldm_checkpoint(const std::vector<SourceTensor>& tensors, const std::string& file) {
  const std::string where = quote(file);
  if (!any_tensor_starts_with(tensors, kLdmUNetPrefix)) {
    // detect_dit_checkpoint() took Z-Image's original files; what else has cap_embedder is Lumina 2's.
    if (std::any_of(tensors.begin(), tensors.end(),
                    [](const SourceTensor& t) { return t.name.find("cap_embedder.") != std::string::npos; }))
      throw InputError(where + " looks like a Lumina 2 transformer (cap_embedder.*, without Z-Image's blocks), which "
                       "dpinfer does not run");
    // detect_dit_checkpoint() took SD3 / SD3.5 files by their probe; one without it is incomplete.
    if (std::any_of(tensors.begin(), tensors.end(),
                    [](const SourceTensor& t) { return t.name.find("joint_blocks.") != std::string::npos; }))
      throw InputError(where + " has SD3 MMDiT keys (joint_blocks.*) but not the first block's context modulation "
                       "joint_blocks.0.context_block.adaLN_modulation.1.bias that identifies an SD3 / SD3.5 "
                       "transformer; the file is incomplete or of another model, re-download it");
    if (const SourceTensor* lora = lora_key(tensors))
      throw InputError(where + " is a LoRA (its key " + quote(lora->name, 80) + "), not a model: give it with --lora, "
                       "and the model it was made for with --model");
    throw InputError(where + " is not a single-file checkpoint dpinfer knows: none of its keys start with " +
                     std::string(kLdmUNetPrefix) +
                     " (the LDM UNet of SD 1.x, 2.x and SDXL) or are a FLUX.1, Chroma, SD3, Qwen-Image or Z-Image "
                     "transformer's (docs/single-files.md); its keys: " + prefixes_found(tensors));
  }
  // diffusers' infer_diffusers_model_type, in its order.
  if (const SourceTensor* in = find_source_tensor(tensors, "model.diffusion_model.input_blocks.0.0.weight");
      in && in->shape.size() == 4 && in->shape[1] == 9)
    throw InputError(where + " is an inpainting checkpoint (its UNet takes 9 input channels); dpinfer generates "
                     "text-to-image only, use the base model's checkpoint");
  if (find_source_tensor(tensors, "edm_mean") || find_source_tensor(tensors, "edm_std"))
    throw InputError(where + " is a Playground v2.5 checkpoint (edm_mean/edm_std), which dpinfer does not support");
  LdmDetection d;
  if (any_tensor_starts_with(tensors, "conditioner.embedders.1.model.")) {
    d.kind = "sdxl";
  } else if (any_tensor_starts_with(tensors, "conditioner.embedders.0.model.")) {
    throw InputError(where + " is an SDXL refiner checkpoint (conditioner.embedders.0.model.*, no CLIP-L); dpinfer "
                     "runs the base model only, use an SDXL base checkpoint");
  } else if (any_tensor_starts_with(tensors, "cond_stage_model.model.")) {
    d.kind = "sd2";
  } else if (any_tensor_starts_with(tensors, "cond_stage_model.transformer.")) {
    d.kind = "sd1";
  } else if (find_source_tensor(tensors, "model.diffusion_model.label_emb.0.0.weight")) {
    d.kind = "sdxl";  // text_time conditioning: only SDXL's UNet has it
  } else if (const SourceTensor* k =
                 find_source_tensor(tensors, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight");
             k && !k->shape.empty()) {
    // The cross-attention width: CLIP ViT-L's 768 (SD 1.x), OpenCLIP ViT-H's 1024 (SD 2.x);
    // diffusers probes input_blocks.2.1's, the same width.
    if (k->shape.back() == 768) d.kind = "sd1";
    if (k->shape.back() == 1024) d.kind = "sd2";
  }
  d.label = single_file_kind_label(d.kind);
  if (d.kind == "sd2")
    // diffusers (create_scheduler_from_ldm) picks epsilon only for a pickle whose global_step
    // is 875000 (SD 2.0-base); a safetensors file has none, so it is v_prediction, SD 2.1's.
    d.variant = "v_prediction (diffusers' choice for SD 2.x files; an epsilon SD 2.x-base needs --base)";
  return d;
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/single_file/dit_detection.h"

#include "dpinfer/pipeline/single_file/single_file.h"

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kComfyPrefix = "model.diffusion_model.";

/// The prefix ("" or ComfyUI's) under which `probe` is a key of `tensors`, or nullopt.
std::optional<std::string> prefix_of(const std::vector<SourceTensor>& tensors, const std::string& probe) {
  for (const char* prefix : {"", kComfyPrefix})
    if (find_source_tensor(tensors, prefix + probe)) return std::string(prefix);
  return std::nullopt;
}

}  // namespace

std::optional<DitDetection> detect_dit_checkpoint(const std::vector<SourceTensor>& tensors, const std::string& file) {
  const std::string where = quote(file);
  // infer_diffusers_model_type checks FLUX.2 before FLUX.1 (CHECKPOINT_KEY_NAMES["flux2"]) and calls every such
  // file "flux-2-dev". The guidance embedder tells [dev] (guidance-distilled) from [klein] (none), whose pipelines
  // differ; the widths and block counts are the config's, checked against --base's.
  if (const auto flux2 = prefix_of(tensors, "single_stream_modulation.lin.weight")) {
    DitDetection d;
    d.kind = find_source_tensor(tensors, *flux2 + "guidance_in.in_layer.weight") ? "flux2-dev" : "flux2-klein";
    d.label = single_file_kind_label(d.kind);
    d.prefix = *flux2;
    d.layout = CheckpointLayout::kFlux2Bfl;
    return d;
  }
  // diffusers 0.36.0 has no probe for Qwen-Image (from_single_file needs the class named): the
  // modulation of its first block and the text input's RMSNorm, which FLUX.1's diffusers names lack.
  if (const auto qwen = prefix_of(tensors, "transformer_blocks.0.img_mod.1.weight");
      qwen && find_source_tensor(tensors, *qwen + "txt_norm.weight")) {
    DitDetection d;
    d.kind = "qwen-image";
    d.label = single_file_kind_label(d.kind);
    d.prefix = *qwen;
    d.layout = CheckpointLayout::kDiffusersNames;
    return d;
  }
  // diffusers' probe is cap_embedder.0.weight of 2560 rows (Qwen3-4B's width; Lumina 2 otherwise).
  // The blocks tell the two apart at any width: Z-Image's ZImageTransformerBlock keeps its
  // modulation Linear at adaLN_modulation.0, Lumina 2's original at .1 (convert_lumina2_to_diffusers).
  if (const auto z = prefix_of(tensors, "cap_embedder.0.weight");
      z && find_source_tensor(tensors, *z + "layers.0.attention.qkv.weight") && find_source_tensor(tensors, *z + "layers.0.adaLN_modulation.0.weight")) {
    DitDetection d;
    d.kind = "z-image-turbo";
    d.label = single_file_kind_label(d.kind);
    d.prefix = *z;
    d.layout = CheckpointLayout::kZImageOriginal;
    return d;
  }
  // CHECKPOINT_KEY_NAMES["sd3"]: the first joint block's context modulation; infer_diffusers_model_type
  // then tells the released models apart by their width (6 * 1536 = 9216) and pos_embed's rows (192² for
  // SD3 medium, 384² for SD3.5 medium), or by a 38th block (SD3.5 large). Another MMDiT (a tiny one, a
  // fine-tune of another width) is still SD3; --base then gives its configs.
  if (const auto sd3 = prefix_of(tensors, "joint_blocks.0.context_block.adaLN_modulation.1.bias")) {
    DitDetection d;
    d.kind = "sd3";
    d.label = single_file_kind_label(d.kind);
    d.prefix = *sd3;
    d.layout = CheckpointLayout::kSd3Mmdit;
    const SourceTensor* modulation = find_source_tensor(tensors, *sd3 + "joint_blocks.0.context_block.adaLN_modulation.1.bias");
    const SourceTensor* pos = find_source_tensor(tensors, *sd3 + "pos_embed");
    const int64_t rows = pos && pos->shape.size() == 3 ? pos->shape[1] : 0;
    const bool width_1536 = !modulation->shape.empty() && modulation->shape.back() == 9216;
    if (width_1536 && rows == 36864)
      d.variant = "SD3 medium";
    else if (width_1536 && rows == 147456)
      d.variant = "SD3.5 medium";
    else if (find_source_tensor(tensors, *sd3 + "joint_blocks.37.x_block.mlp.fc1.weight"))
      d.variant = "SD3.5 large";
    return d;
  }
  const std::optional<std::string> flux = prefix_of(tensors, "double_blocks.0.img_attn.norm.key_norm.scale");
  if (!flux) return std::nullopt;
  DitDetection d;
  d.prefix = *flux;
  d.layout = CheckpointLayout::kFluxBfl;
  // Chroma (lodestones' chroma-unlocked-v*.safetensors): FLUX.1's layout with the distilled guidance
  // layer in place of time_in / vector_in / guidance_in (diffusers 0.36.0 has no probe for it;
  // from_single_file needs ChromaTransformer2DModel named).
  if (find_source_tensor(tensors, d.prefix + "distilled_guidance_layer.in_proj.weight")) {
    d.kind = "chroma";
    d.label = single_file_kind_label(d.kind);
    return d;
  }
  if (find_source_tensor(tensors, d.prefix + "guidance_in.in_layer.bias")) {
    // The guidance-distilled family: img_in's input channels against final_layer's output channels tell
    // Fill (the latents, the masked image's latents and the mask: 64 + 64 + 256 = 384 in, 64 out) and Depth
    // (the latents and the control image's: 128 in, 64 out) from dev (64 in, 64 out). diffusers'
    // infer_diffusers_model_type compares img_in with 384 and 128; the ratios say the same at any width.
    const SourceTensor* img_in = find_source_tensor(tensors, d.prefix + "img_in.weight");
    const SourceTensor* out = find_source_tensor(tensors, d.prefix + "final_layer.linear.weight");
    const int64_t in_channels = img_in && img_in->shape.size() == 2 ? img_in->shape[1] : 0;
    const int64_t out_channels = out && out->shape.size() == 2 ? out->shape[0] : 0;
    if (out_channels > 0 && in_channels == 2 * out_channels)
      throw InputError(where + " is a FLUX.1 Depth transformer (img_in takes " + std::to_string(in_channels) +
                       " channels: latents and the control image), which needs FluxControlPipeline; dpinfer does not "
                       "run it, use FLUX.1 [dev], [schnell] or Fill");
    d.kind = out_channels > 0 && in_channels > 2 * out_channels ? "flux-fill" : "flux-dev";
  } else {
    d.kind = "flux-schnell";
  }
  d.label = single_file_kind_label(d.kind);
  return d;
}

}  // namespace dpinfer::pipeline

#include "single_file_kinds.h"

#include "dpinfer/pipeline/conversion/flux2_bfl_keys.h"
#include "dpinfer/pipeline/conversion/flux_bfl_keys.h"
#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/pipeline/conversion/sd3_keys.h"
#include "dpinfer/pipeline/single_file/single_file.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::single_file_table {
namespace {

constexpr const char* kUNetPrefix = "model.diffusion_model.";
constexpr const char* kVaePrefix = "first_stage_model.";

// The slots (diffusers' single_file_utils.py: convert_ldm_unet_checkpoint's "model.diffusion_model.",
// convert_ldm_vae_checkpoint's "first_stage_model.", convert_ldm_clip_checkpoint's "cond_stage_model.transformer." /
// "conditioner.embedders.0.transformer.", convert_open_clip_checkpoint's "cond_stage_model.model." /
// "conditioner.embedders.1.model."). A DiT file (FLUX.1 BFL, Chroma, Qwen-Image, Z-Image) holds the transformer only,
// under its prefix; the rest comes from options or the base.

std::vector<ComponentSlot> ldm_slots(ComponentSlot text_encoder, std::vector<ComponentSlot> more = {}) {
  std::vector<ComponentSlot> s{{"unet", kUNetPrefix, CheckpointLayout::kLdmUNet, ""},
                               {"vae", kVaePrefix, CheckpointLayout::kLdmVae, "--vae"},
                               std::move(text_encoder)};
  for (ComponentSlot& m : more) s.push_back(std::move(m));
  return s;
}

std::vector<ComponentSlot> sd1_slots(const std::string&) {
  return ldm_slots({"text_encoder", "cond_stage_model.transformer.", CheckpointLayout::kTransformersClip,
                    "--text-encoder"});
}

std::vector<ComponentSlot> sd2_slots(const std::string&) {
  return ldm_slots({"text_encoder", "cond_stage_model.model.", CheckpointLayout::kOpenClip, "--text-encoder"});
}

std::vector<ComponentSlot> sdxl_slots(const std::string&) {
  return ldm_slots({"text_encoder", "conditioner.embedders.0.transformer.", CheckpointLayout::kTransformersClip,
                    "--text-encoder"},
                   {{"text_encoder_2", "conditioner.embedders.1.model.", CheckpointLayout::kOpenClip,
                     "--text-encoder-2"}});
}

// An SD3 / SD3.5 file (Stability AI's) holds the MMDiT under its prefix and may hold the VAE (first_stage_model.*,
// LDM layout) and the text encoders under text_encoders.{clip_l,clip_g,t5xxl}.transformer. in transformers' names
// (diffusers 0.36.0 create_diffusers_clip_model_from_ldm's convert_ldm_clip_checkpoint with those prefixes,
// convert_sd3_t5_checkpoint_to_diffusers).
std::vector<ComponentSlot> sd3_slots(const std::string& prefix) {
  return {{"transformer", prefix, CheckpointLayout::kSd3Mmdit, ""},
          {"vae", kVaePrefix, CheckpointLayout::kLdmVae, "--vae"},
          {"text_encoder", "text_encoders.clip_l.transformer.", CheckpointLayout::kSd3ClipL, "--text-encoder"},
          {"text_encoder_2", "text_encoders.clip_g.transformer.", CheckpointLayout::kTransformersClip,
           "--text-encoder-2"},
          {"text_encoder_3", "text_encoders.t5xxl.transformer.", CheckpointLayout::kDiffusersNames, ""}};
}

/// A DiT transformer file: the transformer in `layout`, a VAE and a text encoder from options or the base.
std::vector<ComponentSlot> dit_slots(const std::string& prefix, CheckpointLayout layout) {
  return {{"transformer", prefix, layout, ""},
          {"vae", "", CheckpointLayout::kLdmVae, "--vae", false},
          {"text_encoder", "", CheckpointLayout::kTransformersClip, "--text-encoder", false}};
}

std::vector<ComponentSlot> flux_slots(const std::string& prefix) {
  std::vector<ComponentSlot> s = dit_slots(prefix, CheckpointLayout::kFluxBfl);
  s.push_back({"text_encoder_2", "", CheckpointLayout::kTransformersClip, "--text-encoder-2", false});
  return s;
}

std::vector<ComponentSlot> chroma_slots(const std::string& prefix) { return dit_slots(prefix, CheckpointLayout::kFluxBfl); }

std::vector<ComponentSlot> qwen_image_slots(const std::string& prefix) {
  return dit_slots(prefix, CheckpointLayout::kDiffusersNames);
}

std::vector<ComponentSlot> z_image_slots(const std::string& prefix) {
  return dit_slots(prefix, CheckpointLayout::kZImageOriginal);
}

std::vector<ComponentSlot> flux2_slots(const std::string& prefix) {
  return dit_slots(prefix, CheckpointLayout::kFlux2Bfl);
}

// What each DiT file's keys say of its config, as diffusers derives it.

// convert_flux_transformer_checkpoint_to_diffusers: the blocks and the guidance embedder; and the channels in
// (img_in: [width, in]) and, where they differ from those, out (final_layer.linear: [out, width], patch 1; a config's
// null out_channels is in_channels), which tell Fill's transformer (384 in, 64 out) from dev's (64, 64).
ConfigFacts flux_facts(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  const FluxBflBlocks b = count_flux_bfl_blocks(prefix, tensors);
  ConfigFacts facts{{"num_layers", b.double_blocks}, {"num_single_layers", b.single_blocks},
                    {"guidance_embeds", b.guidance}};
  const SourceTensor* img_in = find_source_tensor(tensors, prefix + "img_in.weight");
  const SourceTensor* out = find_source_tensor(tensors, prefix + "final_layer.linear.weight");
  if (img_in && img_in->shape.size() == 2) facts.emplace_back("in_channels", img_in->shape[1]);
  if (out && out->shape.size() == 2 && !(img_in && img_in->shape.size() == 2 && img_in->shape[1] == out->shape[0]))
    facts.emplace_back("out_channels", out->shape[0]);
  return facts;
}

// convert_chroma_transformer_checkpoint_to_diffusers: the blocks and the approximator's layers.
ConfigFacts chroma_facts(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  const FluxBflBlocks b = count_flux_bfl_blocks(prefix, tensors);
  return {{"num_layers", b.double_blocks},
          {"num_single_layers", b.single_blocks},
          {"approximator_layers", b.approximator_layers}};
}

// convert_sd3_transformer_checkpoint_to_diffusers: the blocks, the dual-attention blocks, the QK norm, and
// pos_embed's size ([1, pos_embed_max_size², width], PatchEmbed's cropped 2-D sin-cos table).
ConfigFacts sd3_facts(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  const Sd3Blocks b = count_sd3_blocks(prefix, tensors);
  ConfigFacts facts{{"num_layers", b.joint_blocks},
                    {"dual_attention_layers", b.dual_attention_layers},
                    {"qk_norm", b.qk_norm ? nlohmann::json("rms_norm") : nlohmann::json(nullptr)}};
  int64_t side = 0;
  while ((side + 1) * (side + 1) <= b.pos_embed_rows) ++side;
  if (side > 0 && side * side == b.pos_embed_rows) facts.emplace_back("pos_embed_max_size", side);
  return facts;
}

// convert_flux2_transformer_checkpoint_to_diffusers keeps the shapes: the blocks, the guidance embedder, and the
// channels in (img_in: [width, in]) and of the text (txt_in: [width, joint_attention_dim]).
ConfigFacts flux2_facts(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  const Flux2BflShape s = flux2_bfl_shape(prefix, tensors);
  ConfigFacts facts{{"num_layers", s.double_blocks}, {"num_single_layers", s.single_blocks},
                    {"guidance_embeds", s.guidance}};
  if (s.in_channels > 0) facts.emplace_back("in_channels", s.in_channels);
  if (s.joint_attention_dim > 0) facts.emplace_back("joint_attention_dim", s.joint_attention_dim);
  return facts;
}

// Qwen-Image: its blocks (transformer_blocks.N).
ConfigFacts qwen_image_facts(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  return {{"num_layers", key_rules::count_blocks(prefix, "transformer_blocks.", tensors)}};
}

// Z-Image: its main and refiner blocks.
ConfigFacts z_image_facts(const std::string& prefix, const std::vector<SourceTensor>& tensors) {
  return {{"n_layers", key_rules::count_blocks(prefix, "layers.", tensors)},
          {"n_refiner_layers", key_rules::count_blocks(prefix, "noise_refiner.", tensors)}};
}

}  // namespace

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> table{
      {"sd1", "Stable Diffusion 1.x", "StableDiffusionPipeline", true, sd1_slots, nullptr, "LDM single file", "", false},
      {"sd2", "Stable Diffusion 2.x", "StableDiffusionPipeline", true, sd2_slots, nullptr, "LDM single file", "", false},
      {"sdxl", "Stable Diffusion XL base", "StableDiffusionXLPipeline", true, sdxl_slots, nullptr, "LDM single file",
       "", false},
      {"sd3", "Stable Diffusion 3", "StableDiffusion3Pipeline", /*shipped_base=*/false, sd3_slots, sd3_facts,
       "SD3 MMDiT single file", " (stabilityai/stable-diffusion-3.5-large, ...)", false},
      {"flux-dev", "FLUX.1 [dev]", "FluxPipeline", true, flux_slots, flux_facts, "", "",
       /*shipped_t5_vocabulary_stand_in=*/true},
      {"flux-schnell", "FLUX.1 [schnell]", "FluxPipeline", true, flux_slots, flux_facts, "", "", true},
      {"flux-fill", "FLUX.1 Fill [dev]", "FluxFillPipeline", true, flux_slots, flux_facts, "", "", true},
      {"chroma", "Chroma", "ChromaPipeline", /*shipped_base=*/false, chroma_slots, chroma_facts, "", "", false},
      {"qwen-image", "Qwen-Image", "QwenImagePipeline", true, qwen_image_slots, qwen_image_facts, "", "", false},
      {"z-image-turbo", "Z-Image", "ZImagePipeline", true, z_image_slots, z_image_facts, "", "", false},
      // FLUX.2: the tokenizers (Qwen's, Mistral's) and the text encoder are not in the file, and dpinfer ships no
      // configs for it: --base gives them.
      {"flux2-dev", "FLUX.2 [dev]", "Flux2Pipeline", /*shipped_base=*/false, flux2_slots, flux2_facts, "",
       " (black-forest-labs/FLUX.2-dev)", false},
      {"flux2-klein", "FLUX.2 [klein]", "Flux2KleinPipeline", /*shipped_base=*/false, flux2_slots, flux2_facts, "",
       " (black-forest-labs/FLUX.2-klein-4B, ...)", false},
  };
  return table;
}

const Kind* find(const std::string& kind) {
  for (const Kind& k : kinds())
    if (k.kind == kind) return &k;
  return nullptr;
}

const Kind& at(const std::string& kind) {
  const Kind* k = find(kind);
  if (!k) throw Error("single file: no row for kind '" + kind + "'");
  return *k;
}

}  // namespace dpinfer::pipeline::single_file_table

namespace dpinfer::pipeline {

// single_file.h's questions of the table.

const std::vector<std::string>& single_file_kinds() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const single_file_table::Kind& k : single_file_table::kinds()) n.push_back(k.kind);
    return n;
  }();
  return names;
}

std::string single_file_pipeline_class(const std::string& kind) { return single_file_table::at(kind).pipeline_class; }

bool single_file_kind_has_shipped_base(const std::string& kind) {
  const single_file_table::Kind* k = single_file_table::find(kind);
  return k && k->shipped_base;
}

std::string single_file_kind_label(const std::string& kind) {
  if (kind.empty()) return "Stable Diffusion (UNet only)";  // an LDM UNet whose keys do not tell its family
  const single_file_table::Kind* k = single_file_table::find(kind);
  return k ? k->label : kind;
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/families/family_spec.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using Role = ComponentRole;
using Type = SettingSpec::Type;

const std::vector<std::string> kClipTokenizers{"CLIPTokenizer", "CLIPTokenizerFast"};
const std::vector<std::string> kQwen2Tokenizers{"Qwen2Tokenizer", "Qwen2TokenizerFast"};
// Qwen-Image-Edit's processor folder: Qwen's tokenizer beside the Qwen2-VL image processor's preprocessor_config.json.
const std::vector<std::string> kQwen2VLProcessors{"Qwen2VLProcessor", "Qwen2_5_VLProcessor"};
// FLUX.2 [dev]'s tokenizer folder: Mistral Small 3.1's processor (a Tekken tokenizer.json inside).
const std::vector<std::string> kTekkenTokenizers{"PixtralProcessor", "LlamaTokenizerFast", "PreTrainedTokenizerFast"};
const std::vector<std::string> kT5Tokenizers{"T5TokenizerFast", "T5Tokenizer"};

// diffusers' clip_skip: CLIP layers skipped from the end. AUTOMATIC1111's "Clip skip" counts
// the last layer too, so its 2 is diffusers' 1.
SettingSpec clip_skip() {
  return {"clip_skip", Type::kInteger, 0, 0, 1000, "CLIP layers to skip from the end (diffusers' clip_skip)",
          "Clip skip", 1};
}

// diffusers' guidance_rescale (Lin et al. 2023, §3.4); the infotext label is the one of
// AUTOMATIC1111's CFG Rescale extension.
SettingSpec guidance_rescale() {
  return {"guidance_rescale", Type::kNumber, 0.0, 0, 1e6,
          "rescale the guided prediction toward the text prediction's std (0: off)", "CFG Rescale phi", 0};
}

// DDIM's eta, as the pipelines' __call__ takes it; the other schedulers ignore it.
SettingSpec eta() {
  return {"eta", Type::kNumber, 0.0, 0, 1e6, "DDIM's eta: the share of fresh noise per step (0: deterministic)",
          "Eta", 0};
}

// diffusers' max_sequence_length: Qwen-Image keeps that many of the prompt's text states (after its
// template drop; QwenImagePipeline.check_inputs refuses more than 1024); Z-Image tokenizes the
// chat-formatted prompt to that many tokens. AUTOMATIC1111 has no label for it; this one is dpinfer's.
// SD3: the T5 tokens (StableDiffusion3Pipeline.check_inputs refuses more than 512; its default is 256),
// which without T5 is the count of zero rows after the CLIP tokens.
SettingSpec max_sequence_length(int64_t max, const std::string& help, int64_t default_value = 512) {
  return {"max_sequence_length", Type::kInteger, default_value, 1, static_cast<double>(max), help, "Max sequence length",
          0};
}

// The Z-Image settings: ZImagePipeline.__call__'s arguments beyond prompt, size, steps and guidance.
// AUTOMATIC1111 has none of them; the infotext labels are dpinfer's.
// diffusers types cfg_normalization as a bool but uses float(cfg_normalization) as the factor, so
// False is 0 and True is 1.
SettingSpec cfg_normalization() {
  return {"cfg_normalization", Type::kNumber, 0.0, 0, 1e6,
          "cap the guided prediction's norm at this multiple of the text prediction's (diffusers' "
          "cfg_normalization; 0: off, 1: true)",
          "CFG normalization", 0};
}

SettingSpec cfg_truncation() {
  return {"cfg_truncation", Type::kNumber, 1.0, 0, 1e6,
          "stop guiding once the normalised time (0 at the first step, 1 at the end) passes this (diffusers' "
          "cfg_truncation; above 1: never, the default 1: never)",
          "CFG truncation", 0};
}

// FLUX.2's text_encoder_out_layers (Flux2KleinPipeline.__call__'s and Flux2Pipeline.__call__'s): the text encoder's
// hidden states stacked per token, as many as the transformer's joint_attention_dim holds. Hidden state 0 is the
// embeddings, k the output of layer k.
SettingSpec text_encoder_out_layers(std::vector<int64_t> defaults) {
  return {"text_encoder_out_layers", Type::kIntegerList, nlohmann::json(defaults), 0, 1000,
          "the text encoder's hidden states stacked per token (diffusers' text_encoder_out_layers; 0 is the "
          "embeddings, k the output of layer k), as many as the transformer's joint_attention_dim holds",
          ""};
}

// SD3.5's skip-layer guidance: StableDiffusion3Pipeline.__call__'s skip_guidance_layers,
// skip_layer_guidance_scale, _start and _stop (diffusers' defaults; SD3.5 Medium's model card
// recommends layers [7, 8, 9]). Off while the layer list is empty. The infotext labels are dpinfer's.
std::vector<SettingSpec> skip_layer_guidance() {
  return {
      {"skip_guidance_layers", Type::kIntegerList, nlohmann::json::array(), 0, 1000,
       "transformer blocks to skip in an extra pass on the prompt that steers away from it (diffusers' "
       "skip_guidance_layers, e.g. [7,8,9] for SD3.5 Medium; []: off; only with CFG)",
       "SLG layers", 0},
      {"skip_layer_guidance_scale", Type::kNumber, 2.8, 0, 1e6,
       "the skip-layer guidance's weight (diffusers' skip_layer_guidance_scale)", "SLG scale", 0},
      {"skip_layer_guidance_start", Type::kNumber, 0.01, 0, 1,
       "skip-layer guidance runs at steps i with start * steps < i < stop * steps (diffusers' "
       "skip_layer_guidance_start)",
       "SLG start", 0},
      {"skip_layer_guidance_stop", Type::kNumber, 0.2, 0, 1,
       "the end of that range (diffusers' skip_layer_guidance_stop)", "SLG stop", 0},
  };
}

std::vector<SettingSpec> stable_diffusion_3_settings() {
  std::vector<SettingSpec> specs{
      clip_skip(), max_sequence_length(512, "T5 tokens after the 77 CLIP tokens (diffusers' max_sequence_length, at "
                                            "most 512); without T5, that many zero rows", 256)};
  for (SettingSpec& s : skip_layer_guidance()) specs.push_back(std::move(s));
  return specs;
}

// FluxPipeline's true_cfg_scale: with a negative prompt and a value above 1, a second transformer pass on
// the negative prompt and neg + s (pos - neg), beside the distilled guidance input. AUTOMATIC1111 has no
// label for it; this one is dpinfer's.
SettingSpec true_cfg_scale() {
  return {"true_cfg_scale", Type::kNumber, 1.0, 0, 1e6,
          "FluxPipeline's true_cfg_scale: true CFG on the negative prompt when above 1 and a negative prompt is "
          "given (1: off)",
          "True CFG scale", 0};
}

// diffusers' First Block Cache (FirstBlockCacheConfig(threshold), nn/first_block_cache.h), decided per image;
// off by default, as evaluation runs need the exact model. The infotext label is dpinfer's.
SettingSpec first_block_cache() {
  return {"first_block_cache", Type::kNumber, 0.0, 0, 1e6,
          "First Block Cache's threshold: a step whose first transformer block changed its output by less than this "
          "(relative abs-mean, against the last step that ran every block) skips the other blocks and reuses their "
          "residual, as diffusers' FirstBlockCacheConfig(threshold) (0: off; e.g. 0.05 to 0.2: fewer block runs, a "
          "slightly different image)",
          "First block cache", 0};
}

// DeepCache for the UNet families (the PyPI package DeepCache 0.1.1's DeepCacheSDHelper, models/unets/deep_cache.h):
// cache_interval and cache_branch_id. Off by default (interval 1), as evaluation runs need the exact model; the
// branch defaults to 0, the reference README's choice (with interval 3). The infotext labels are dpinfer's.
std::vector<SettingSpec> deep_cache() {
  return {
      {"deep_cache_interval", Type::kInteger, 1, 1, 1000,
       "DeepCache's cache_interval: every this many steps the whole UNet runs and keeps its deep features; the "
       "steps between run only the shallow branch and reuse them (1: off; e.g. 3: about a third of the full UNet "
       "calls, a slightly different image)",
       "DeepCache interval", 0},
      {"deep_cache_branch", Type::kInteger, 0, 0, 1000,
       "DeepCache's cache_branch_id, 3 * block + layer: how deep the shallow branch goes (0, the reference's "
       "choice: the top block's first layer only; at most 3 * the UNet's down blocks - 1)",
       "DeepCache branch", 0},
  };
}

std::vector<SettingSpec> unet_settings() {
  std::vector<SettingSpec> specs{clip_skip(), guidance_rescale(), eta()};
  for (SettingSpec& s : deep_cache()) specs.push_back(std::move(s));
  return specs;
}

// cache-dit's DBCache with its TaylorSeer calibrator (nn/dbcache.h), decided per image; off by default. Each key is
// one of cache-dit 1.5.3's options, with its default (DBCacheConfig's; TaylorSeer off); the infotext labels are
// dpinfer's. Not with first_block_cache (check_block_cache_settings).
std::vector<SettingSpec> dbcache_settings() {
  return {
      {"dbcache", Type::kNumber, 0.0, 0, 1e6,
       "DBCache's threshold (cache-dit's DBCacheConfig residual_diff_threshold): after the warm-up, a step whose first "
       "dbcache_fn transformer blocks changed their output by less than this (relative abs-mean, against the last step "
       "that ran every block) skips the middle blocks and reuses their residual (0: off; cache-dit's default 0.08; 1 or "
       "more: every step after the warm-up skips)",
       "DBCache", 0},
      {"dbcache_fn", Type::kInteger, 8, 1, 10000,
       "DBCache's first blocks, always run, whose output decides (Fn_compute_blocks; FLUX.1 counts its double- then "
       "single-stream blocks, Chroma caches each of the two lists apart)",
       "DBCache Fn", 0},
      {"dbcache_bn", Type::kInteger, 0, 0, 10000, "DBCache's last blocks, always run (Bn_compute_blocks)", "DBCache Bn", 0},
      {"dbcache_warmup", Type::kInteger, 8, 0, 100000, "DBCache's first steps, which run every block (max_warmup_steps)",
       "DBCache warmup", 0},
      {"dbcache_max_cached", Type::kInteger, -1, -1, 100000,
       "DBCache skips no step after this many skipped ones (max_cached_steps; -1: no limit)", "DBCache max cached", 0},
      {"dbcache_max_continuous", Type::kInteger, -1, -1, 100000,
       "DBCache skips no more than this many steps in a row (max_continuous_cached_steps; -1: no limit)",
       "DBCache max continuous", 0},
      {"taylorseer_order", Type::kInteger, 0, 0, 2,
       "TaylorSeer with DBCache (cache-dit's TaylorSeerCalibratorConfig(taylorseer_order)): a skipped step "
       "extrapolates the middle blocks' residuals from the computed steps by a Taylor series of this order (0: off, "
       "the last residual as it is)",
       "TaylorSeer order", 0},
  };
}

// A family's own settings, then DBCache's (Chroma, Z-Image and SD3: diffusers registers no First Block Cache for
// their blocks).
std::vector<SettingSpec> with_dbcache(std::vector<SettingSpec> own) {
  for (SettingSpec& s : dbcache_settings()) own.push_back(std::move(s));
  return own;
}

// A family's own settings, then the step caches' (First Block Cache and DBCache) that FLUX.1 and Qwen-Image take.
std::vector<SettingSpec> with_block_caches(std::vector<SettingSpec> own) {
  own.push_back(first_block_cache());
  return with_dbcache(std::move(own));
}

}  // namespace

const std::vector<FamilySpec>& family_specs() {
  // One row per family: its facts. A new family is a row here, its functions' row in families.cpp and its own
  // files in families/.
  static const std::vector<FamilySpec> table{
      {
          "stable-diffusion",
          "Stable Diffusion",
          {"StableDiffusionPipeline", "StableDiffusionInpaintPipeline"},
          {{"unet", Role::kDenoiser, {"UNet2DConditionModel"}},
           {"text_encoder", Role::kTextEncoder, {"CLIPTextModel"}},
           {"tokenizer", Role::kTokenizer, kClipTokenizers},
           {"vae", Role::kVae, {"AutoencoderKL"}},
           {"scheduler", Role::kScheduler, {}}},
          unet_settings(),
          /*default_steps=*/50,
          /*default_guidance_scale=*/7.5,
          /*size_multiple=*/8,
          Prediction::kNoise,
          stable_diffusion_lora_rules,
          /*default_strength=*/0.8,  // StableDiffusionImg2ImgPipeline
          /*default_inpaint_strength=*/1.0,  // StableDiffusionInpaintPipeline
          /*cuda_graphs=*/true,
      },
      {
          "stable-diffusion-xl",
          "Stable Diffusion XL",
          {"StableDiffusionXLPipeline", "StableDiffusionXLInpaintPipeline"},
          {{"unet", Role::kDenoiser, {"UNet2DConditionModel"}},
           {"text_encoder", Role::kTextEncoder, {"CLIPTextModel"}},
           {"text_encoder_2", Role::kTextEncoder, {"CLIPTextModelWithProjection"}},
           {"tokenizer", Role::kTokenizer, kClipTokenizers},
           {"tokenizer_2", Role::kTokenizer, kClipTokenizers},
           {"vae", Role::kVae, {"AutoencoderKL"}},
           {"scheduler", Role::kScheduler, {}}},
          unet_settings(),
          /*default_steps=*/50,
          /*default_guidance_scale=*/5.0,
          /*size_multiple=*/8,
          Prediction::kNoise,
          stable_diffusion_xl_lora_rules,
          /*default_strength=*/0.3,  // StableDiffusionXLImg2ImgPipeline
          /*default_inpaint_strength=*/0.9999,  // StableDiffusionXLInpaintPipeline
          /*cuda_graphs=*/true,
      },
      {
          "qwen-image",
          "Qwen-Image",
          {"QwenImagePipeline", "QwenImageEditPipeline", "QwenImageEditPlusPipeline"},
          {{"transformer", Role::kDenoiser, {"QwenImageTransformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"Qwen2_5_VLForConditionalGeneration"}},
           {"tokenizer", Role::kTokenizer, kQwen2Tokenizers},
           // The Edit pipelines': the tokenizer they encode with, and the vision tower's image processor.
           {"processor", Role::kTokenizer, kQwen2VLProcessors, /*optional=*/true},
           {"vae", Role::kVae, {"AutoencoderKLQwenImage"}},
           {"scheduler", Role::kScheduler, {}}},
          with_block_caches({max_sequence_length(1024, "prompt text states the transformer sees, after the template "
                                                       "(diffusers' max_sequence_length, at most 1024); longer prompts "
                                                       "are cut")}),
          /*default_steps=*/50,
          /*default_guidance_scale=*/4.0,  // true_cfg_scale; on only with a negative prompt
          /*size_multiple=*/16,
          Prediction::kFlowVelocity,
          qwen_image_lora_rules,
          /*default_strength=*/0.6,          // QwenImageImg2ImgPipeline
          /*default_inpaint_strength=*/0.6,  // QwenImageInpaintPipeline; the Edit classes' references: neither
          /*cuda_graphs=*/true,
      },
      {
          "z-image",
          "Z-Image",
          {"ZImagePipeline"},
          {{"transformer", Role::kDenoiser, {"ZImageTransformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"Qwen3Model"}},
           {"tokenizer", Role::kTokenizer, kQwen2Tokenizers},
           {"vae", Role::kVae, {"AutoencoderKL"}},
           {"scheduler", Role::kScheduler, {}}},
          with_dbcache({max_sequence_length(131072, "tokens of the chat-formatted prompt the text encoder sees; the "
                                                    "rest is dropped (diffusers' max_sequence_length)"),
                        cfg_normalization(), cfg_truncation()}),
          /*default_steps=*/50,
          /*default_guidance_scale=*/5.0,
          /*size_multiple=*/16,  // vae_scale_factor * 2 of the real VAE; each model checks its own
          Prediction::kFlowVelocity,
          z_image_lora_rules,
          /*default_strength=*/0.6,  // ZImageImg2ImgPipeline
          /*default_inpaint_strength=*/0,
          /*cuda_graphs=*/true,
      },
      {
          "flux",
          "FLUX.1",
          {"FluxPipeline", "FluxKontextPipeline", "FluxFillPipeline"},
          {{"transformer", Role::kDenoiser, {"FluxTransformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"CLIPTextModel"}},
           {"text_encoder_2", Role::kTextEncoder, {"T5EncoderModel"}},
           {"tokenizer", Role::kTokenizer, kClipTokenizers},
           {"tokenizer_2", Role::kTokenizer, kT5Tokenizers},
           {"vae", Role::kVae, {"AutoencoderKL"}},
           {"scheduler", Role::kScheduler, {}}},
          with_block_caches({max_sequence_length(512, "T5 tokens of the prompt (padded to this length; diffusers' "
                                                      "max_sequence_length, at most 512); longer prompts are cut"),
                             true_cfg_scale()}),
          /*default_steps=*/28,
          /*default_guidance_scale=*/3.5,  // the distilled guidance input; ignored without guidance embeds
          /*size_multiple=*/16,
          Prediction::kFlowVelocity,
          flux_lora_rules,
          /*default_strength=*/0.6,          // FluxImg2ImgPipeline
          /*default_inpaint_strength=*/0.6,  // FluxInpaintPipeline
          /*cuda_graphs=*/true,
      },
      {
          "chroma",
          "Chroma",
          {"ChromaPipeline"},
          {{"transformer", Role::kDenoiser, {"ChromaTransformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"T5EncoderModel"}},
           {"tokenizer", Role::kTokenizer, kT5Tokenizers},
           {"vae", Role::kVae, {"AutoencoderKL"}},
           {"scheduler", Role::kScheduler, {}}},
          with_dbcache({max_sequence_length(512, "T5 tokens of the prompt (padded to this length, the padding masked but "
                                                 "for one token; diffusers' max_sequence_length, at most 512); longer "
                                                 "prompts are cut")}),
          /*default_steps=*/35,
          /*default_guidance_scale=*/5.0,  // real CFG, on above 1, with the negative prompt or ""
          /*size_multiple=*/16,
          Prediction::kFlowVelocity,
          chroma_lora_rules,
          /*default_strength=*/0.9,  // ChromaImg2ImgPipeline
          /*default_inpaint_strength=*/0,
          /*cuda_graphs=*/true,
      },
      {
          "flux2",
          "FLUX.2 [klein]",
          {"Flux2KleinPipeline"},
          {{"transformer", Role::kDenoiser, {"Flux2Transformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"Qwen3ForCausalLM"}},
           {"tokenizer", Role::kTokenizer, kQwen2Tokenizers},
           {"vae", Role::kVae, {"AutoencoderKLFlux2"}},
           {"scheduler", Role::kScheduler, {}}},
          {max_sequence_length(131072, "tokens of the chat-formatted prompt the text encoder sees, padded to this "
                                       "length (diffusers' max_sequence_length); longer prompts are cut"),
           text_encoder_out_layers({9, 18, 27})},
          /*default_steps=*/50,             // Flux2KleinPipeline.__call__'s (the distilled models' cards say 4)
          /*default_guidance_scale=*/4.0,   // CFG on "" for the Base models; ignored by the distilled ones
          /*size_multiple=*/16,  // vae_scale_factor * 2 of the real VAE; each model checks its own
          Prediction::kFlowVelocity,
          flux2_lora_rules,  // Flux2LoraLoaderMixin: the transformer
          /*default_strength=*/0,  // no img2img: Flux2KleinPipeline's `image` is a reference (flux2_reference_facts)
          /*default_inpaint_strength=*/0,
          /*cuda_graphs=*/true,
      },
      {
          "flux2-dev",
          "FLUX.2 [dev]",
          {"Flux2Pipeline"},
          {{"transformer", Role::kDenoiser, {"Flux2Transformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"Mistral3ForConditionalGeneration"}},
           {"tokenizer", Role::kTokenizer, kTekkenTokenizers},
           {"vae", Role::kVae, {"AutoencoderKLFlux2"}},
           {"scheduler", Role::kScheduler, {}}},
          {max_sequence_length(131072, "tokens of the chat-formatted prompt (system message included) the text "
                                       "encoder sees, padded to this length (diffusers' max_sequence_length); "
                                       "longer prompts are cut"),
           text_encoder_out_layers({10, 20, 30})},
          /*default_steps=*/50,            // Flux2Pipeline.__call__'s
          /*default_guidance_scale=*/4.0,  // the transformer's guidance input (guidance-distilled; no CFG)
          /*size_multiple=*/16,            // vae_scale_factor * 2 of the real VAE; each model checks its own
          Prediction::kFlowVelocity,
          flux2_lora_rules,  // Flux2LoraLoaderMixin, as for [klein]: the transformer
          /*default_strength=*/0,  // no img2img: Flux2Pipeline's `image` is a reference (flux2_reference_facts)
          /*default_inpaint_strength=*/0,
          /*cuda_graphs=*/true,  // the same pipeline code as [klein]'s (flux2.cpp)
      },
      {
          "stable-diffusion-3",
          "Stable Diffusion 3",
          {"StableDiffusion3Pipeline"},
          {{"transformer", Role::kDenoiser, {"SD3Transformer2DModel"}},
           {"text_encoder", Role::kTextEncoder, {"CLIPTextModelWithProjection"}},
           {"text_encoder_2", Role::kTextEncoder, {"CLIPTextModelWithProjection"}},
           // T5: optional, as in diffusers (zeros when absent); every real SD3 / SD3.5 folder has it.
           {"text_encoder_3", Role::kTextEncoder, {"T5EncoderModel"}, /*optional=*/true},
           {"tokenizer", Role::kTokenizer, kClipTokenizers},
           {"tokenizer_2", Role::kTokenizer, kClipTokenizers},
           {"tokenizer_3", Role::kTokenizer, kT5Tokenizers, /*optional=*/true},
           {"vae", Role::kVae, {"AutoencoderKL"}},
           {"scheduler", Role::kScheduler, {}}},
          with_dbcache(stable_diffusion_3_settings()),
          /*default_steps=*/28,
          /*default_guidance_scale=*/7.0,
          /*size_multiple=*/16,  // vae_scale_factor * patch_size of the real models; each model checks its own
          Prediction::kFlowVelocity,
          stable_diffusion_3_lora_rules,
          /*default_strength=*/0.6,          // StableDiffusion3Img2ImgPipeline
          /*default_inpaint_strength=*/0.6,  // StableDiffusion3InpaintPipeline
          /*cuda_graphs=*/true,
      },
  };
  return table;
}

const FamilySpec* find_family_spec(const std::string& pipeline_class) {
  for (const FamilySpec& f : family_specs())
    for (const std::string& c : f.pipeline_classes)
      if (c == pipeline_class) return &f;
  return nullptr;
}

std::string supported_pipeline_classes() {
  std::vector<std::string> names;
  for (const FamilySpec& f : family_specs())
    names.insert(names.end(), f.pipeline_classes.begin(), f.pipeline_classes.end());
  return join(names);
}

std::string family_labels(const std::function<bool(const FamilySpec&)>& which) {
  std::vector<std::string> labels;
  for (const FamilySpec& f : family_specs())
    if (which(f)) labels.push_back(f.label);
  if (labels.size() < 2) return join(labels);
  const std::string last = labels.back();
  labels.pop_back();
  return join(labels) + " and " + last;
}

std::string values_by_family(const std::function<std::string(const FamilySpec&)>& value) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // value -> labels, in row order
  for (const FamilySpec& f : family_specs()) {
    const std::string v = value(f);
    if (v.empty()) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) it = groups.insert(groups.end(), {v, {}});
    it->second.push_back(f.label);
  }
  std::vector<std::string> parts;
  for (const auto& [v, labels] : groups) parts.push_back(fmt::format("{} for {}", v, join(labels)));
  return join(parts, "; ");
}

}  // namespace dpinfer::pipeline

// Ref: diffusers 0.36 loaders/lora_pipeline.py (each mixin's lora_state_dict: which converter runs
// for which keys) and loaders/lora_conversion_utils.py; the dispatch mirrors map_lora_keys'.
#include "dpinfer/pipeline/loading/lora_format.h"

#include <algorithm>
#include <map>

#include "dpinfer/pipeline/loading/lora_flux_keys.h"
#include "dpinfer/pipeline/loading/lora_flux_mixture_keys.h"
#include "dpinfer/pipeline/loading/lora_flux2_keys.h"
#include "dpinfer/pipeline/loading/lora_flux_xlabs_keys.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kBflFlux = "kohya / ComfyUI FLUX.1 (BFL block names)";
constexpr const char* kMixtureFlux = "FLUX.1 in diffusers' underscored names (lora_transformer_)";
constexpr const char* kXlabsFlux = "XLabs FLUX.1";
constexpr const char* kBflFlux2 = "ai-toolkit / ComfyUI FLUX.2 (BFL block names)";
constexpr const char* kOriginalDit = "Qwen-Image / Z-Image original names";
constexpr const char* kKohya = "kohya / A1111";
constexpr const char* kLoCon = "kohya / A1111 with 3x3 convolutions (LoCon)";
constexpr const char* kPeft = "diffusers / PEFT";
constexpr const char* kOldDiffusers =
    "diffusers before PEFT (lora_linear_layer or attention-processor names, which diffusers reads as PEFT's)";

bool has(const std::string& s, const char* piece) { return s.find(piece) != std::string::npos; }

bool any_key(const std::vector<LoraTensorKey>& keys, bool (*test)(const std::string&)) {
  return std::any_of(keys.begin(), keys.end(), [&](const LoraTensorKey& k) { return test(k.key); });
}

bool is_kohya_down(const std::string& k) { return has(k, ".lora_down.weight"); }
bool is_kohya_name(const std::string& k) { return starts_with(k, "lora_unet_") || starts_with(k, "lora_te"); }
bool is_bfl_name(const std::string& k) {
  for (const char* bfl : {"lora_unet_double_blocks_", "lora_unet_single_blocks_", "diffusion_model.double_blocks.",
                          "diffusion_model.single_blocks.", "double_blocks.", "single_blocks."})
    if (starts_with(k, bfl)) return true;
  return false;
}

/// A kohya file with a down factor of a kernel larger than 1x1: LyCORIS LoCon's resnet convolutions.
bool has_wide_conv(const std::vector<LoraTensorKey>& keys) {
  return std::any_of(keys.begin(), keys.end(), [](const LoraTensorKey& k) {
    return is_kohya_down(k.key) && k.shape.size() == 4 && (k.shape[2] > 1 || k.shape[3] > 1);
  });
}

std::string kohya_or_locon(const std::vector<LoraTensorKey>& keys) { return has_wide_conv(keys) ? kLoCon : kKohya; }

/// A key's base name and whether it is a down factor (A), an up factor (B) or neither.
enum class Factor { kNone, kDown, kUp, kAlpha };
Factor factor_of(const std::string& key, std::string* base) {
  static const std::pair<const char*, Factor> kSuffixes[] = {
      {".lora_down.weight", Factor::kDown}, {".lora_A.weight", Factor::kDown}, {".down.weight", Factor::kDown},
      {".lora_up.weight", Factor::kUp},     {".lora_B.weight", Factor::kUp},   {".up.weight", Factor::kUp},
      {".alpha", Factor::kAlpha}};
  for (const auto& [suffix, kind] : kSuffixes)
    if (ends_with(key, suffix)) {
      *base = key.substr(0, key.size() - std::string(suffix).size());
      // ".down.weight" / ".up.weight" are LoRA factors only in a LoRA's module (XLabs' "qkv_lora1", diffusers'
      // older ".lora."), not a model's (a VAE's "up" blocks).
      const bool plain = std::string(suffix) == ".down.weight" || std::string(suffix) == ".up.weight";
      if (plain && base->find("lora") == std::string::npos) return Factor::kNone;
      return kind;
    }
  return Factor::kNone;
}

/// The component a key's prefix names.
std::string component_of(const std::string& key, bool flux) {
  if (starts_with(key, "text_encoder_2.") || starts_with(key, "lora_te2_")) return "text_encoder_2";
  if (starts_with(key, "text_encoder.") || starts_with(key, "lora_te_") || starts_with(key, "lora_te1_") ||
      starts_with(key, "text_encoders.clip_l."))
    return "text_encoder";
  if (starts_with(key, "unet.")) return "unet";
  if (starts_with(key, "lora_unet_")) return flux ? "transformer" : "unet";
  return "transformer";  // transformer., lora_transformer_, diffusion_model., XLabs' and bare module names
}

/// The cross-attention width of a UNet LoRA: the input of an attn2 to_k down factor (768 SD 1.x, 1024 SD 2.x,
/// 2048 SDXL), or 0.
int64_t cross_attention_width(const std::vector<LoraTensorKey>& keys) {
  for (const LoraTensorKey& k : keys) {
    std::string base;
    if (factor_of(k.key, &base) != Factor::kDown || k.shape.size() != 2) continue;
    if (ends_with(base, "attn2.to_k") || ends_with(base, "attn2_to_k") || ends_with(base, "attn2.processor.to_k_lora"))
      return k.shape[1];
  }
  return 0;
}

std::vector<std::string> families_of(const std::vector<LoraTensorKey>& keys, const std::string& format) {
  auto any = [&](const char* piece) {
    return std::any_of(keys.begin(), keys.end(), [&](const LoraTensorKey& k) { return has(k.key, piece); });
  };
  if (format == kBflFlux) return {"FLUX.1 / Chroma (BFL block names)"};
  if (format == kMixtureFlux) return {"FLUX.1 / Chroma (diffusers' underscored names)"};
  if (format == kXlabsFlux) return {"FLUX.1 (XLabs' names)"};
  if (format == kBflFlux2) return {"FLUX.2 (BFL block names)"};
  if (any("joint_blocks")) return {"SD3 / SD3.5 (original MMDiT names, joint_blocks)"};
  const bool unet = any_key(keys, [](const std::string& k) {
    return starts_with(k, "unet.") || (starts_with(k, "lora_unet_") && !is_bfl_name(k));
  });
  if (unet) {
    const bool sdxl_names = any("lora_te1_") || any("lora_te2_") || any("text_encoder_2.");
    const int64_t width = cross_attention_width(keys);
    const std::string sgm = any("input_blocks") || any("output_blocks") ? ", original SGM block names" : "";
    if (width == 2048 || (width == 0 && sdxl_names)) return {"SDXL (" + std::string(sdxl_names ? "lora_te1_/lora_te2_ or text_encoder_2 names, " : "") + "cross-attention width " + (width ? "2048" : "not in the file") + sgm + ")"};
    if (width == 768) return {"SD 1.x (cross-attention width 768" + sgm + ")"};
    if (width == 1024) return {"SD 2.x (cross-attention width 1024" + sgm + ")"};
    return {"a UNet model: SD 1.x/2.x or SDXL (" + std::string(sdxl_names ? "SDXL's two text encoders' names, " : "") +
            (width ? "cross-attention width " + std::to_string(width) + ", none of 768/1024/2048" : "no cross-attention layer") + sgm + ")"};
  }
  if (any("single_transformer_blocks") || any("distilled_guidance_layer"))
    return {any("distilled_guidance_layer") ? "Chroma (diffusers names, distilled_guidance_layer)"
                                            : "FLUX.1 / Chroma (diffusers names, single_transformer_blocks)"};
  if (any("img_mlp") || any("txt_mlp") || any("img_mod")) return {"Qwen-Image (img_mlp / txt_mlp names)"};
  if (any("context_refiner") || any("noise_refiner") || any("all_final_layer") || any(".attention.to_") ||
      any(".attention.out"))
    return {"Z-Image (refiner / layers.<i>.attention names)"};
  if (any("transformer_blocks") && any("add_q_proj")) return {"SD3 / SD3.5 (transformer_blocks with add_q_proj)"};
  return {};
}

/// What a file's DoRA tensors add to its format, or "": diffusers' (PEFT's) lora_magnitude_vector makes DoRA layers
/// (merged as PEFT merges them); kohya's dora_scale is dropped by every diffusers 0.36 lora_state_dict.
std::string dora_note(const std::vector<LoraTensorKey>& keys) {
  if (any_key(keys, [](const std::string& k) { return ends_with(k, ".lora_magnitude_vector"); }))
    return ", DoRA (lora_magnitude_vector)";
  if (any_key(keys, [](const std::string& k) { return has(k, "dora_scale"); }))
    return ", DoRA scales (dora_scale) that diffusers 0.36 drops: merged as a plain LoRA";
  return "";
}

/// lora_format() without dora_note().
std::string key_format(const std::vector<LoraTensorKey>& keys, const LoraKeyRules& rules) {
  for (const LoraTensorKey& k : keys)
    if (const std::string kind = unread_lora_kind(k.key); !kind.empty()) return kind + " (dpinfer does not read it)";
  // diffusers' pre-PEFT spellings (the keys peft_spelling respells), before the FLUX.1 checks: an attention
  // processor's "processor.to_q_lora" is not XLabs' "processor.qkv_lora1".
  if (any_key(keys, [](const std::string& k) { return peft_spelling(k) != k; }) &&
      !any_key(keys, [](const std::string& k) { return has(k, "qkv_lora") || has(k, "proj_lora"); }))
    return kOldDiffusers;
  if (rules.bfl_flux2 && is_bfl_flux2_lora(keys)) return kBflFlux2;
  // A FLUX.1 kohya file where its converter is off (a UNet family): still named for what it is.
  if (!rules.kohya_flux && any_key(keys, is_bfl_name) && any_key(keys, is_kohya_down)) return kBflFlux;
  if (rules.kohya_flux) {
    if (is_kohya_flux_lora(keys)) return kBflFlux;
    if (is_mixture_flux_lora(keys)) return kMixtureFlux;
    if (is_xlabs_flux_lora(keys)) return kXlabsFlux;
    if (any_key(keys, [](const std::string& k) { return has(k, "query_norm.scale"); }))
      return "BFL FLUX.1 Control LoRA (dpinfer does not read it: no control pipeline)";
    if (any_key(keys, [](const std::string& k) { return has(k, "base_model"); }))
      return "fal FLUX.1 Kontext (dpinfer does not read it yet)";
  }
  for (const LoraTensorKey& k : keys)
    for (const auto& [piece, what] : rules.refused)
      if (has(k.key, piece.c_str())) return what + " (dpinfer does not read it)";
  if (rules.non_diffusers_transformer &&
      any_key(keys, [](const std::string& k) { return !starts_with(k, "transformer."); }))
    return kOriginalDit;
  if (rules.kohya_unet && any_key(keys, is_kohya_name)) return kohya_or_locon(keys);
  return kPeft;
}

/// Whether a BFL-named LoRA's factor shapes say FLUX.2 (its SwiGLU feed-forwards) rather than FLUX.1: a single
/// block's linear1 gives q, k, v and the MLP's input, 3 + 4 = 7 times the width in FLUX.1 and 3 + 2 x 3 = 9 times in
/// FLUX.2 (gate and up of an MLP 3 times as wide); a double block's img_mlp.0 / txt_mlp.0 gives 4 times the width in
/// FLUX.1 and 2 x 3 = 6 times in FLUX.2. The width is the down factor's input (the model's hidden size).
bool bfl_shapes_say_flux2(const std::vector<LoraTensorKey>& keys) {
  std::map<std::string, std::pair<int64_t, int64_t>> layers;  // base -> (down's input width, up's rows)
  for (const LoraTensorKey& k : keys) {
    std::string base;
    const Factor f = factor_of(k.key, &base);
    if (f == Factor::kDown && k.shape.size() == 2) layers[base].first = k.shape[1];
    if (f == Factor::kUp && k.shape.size() == 2) layers[base].second = k.shape[0];
  }
  for (const auto& [base, widths] : layers) {
    const auto [in, out] = widths;
    if (in <= 0) continue;
    if (ends_with(base, ".linear1") && has(base, "single_blocks.") && out == 9 * in) return true;
    if ((ends_with(base, ".img_mlp.0") || ends_with(base, ".txt_mlp.0")) && out == 6 * in) return true;
  }
  return false;
}

}  // namespace

std::string lora_format(const std::vector<LoraTensorKey>& keys, const LoraKeyRules& rules) {
  return key_format(without_dora_scales(keys), rules) + dora_note(keys);
}

std::string rank_text(int64_t min_rank, int64_t max_rank) {
  if (min_rank == max_rank) return "rank " + std::to_string(min_rank);
  return "ranks " + std::to_string(min_rank) + "-" + std::to_string(max_rank);
}

LoraNameFacts describe_lora_names(const std::vector<LoraTensorKey>& keys) {
  LoraNameFacts facts;
  // The format as the family that reads such names would find it: FLUX.1's converters first (their
  // tests need FLUX.1's names), then the original DiT names, then kohya's, else PEFT's.
  const bool bfl = any_key(keys, is_bfl_name);
  // FLUX.2's own BFL names (its shared modulations), or BFL names with lora_A factors, which FLUX.1's loader reads
  // nothing from and FLUX.2's converts, or ComfyUI's lora_down names whose shapes are FLUX.2's.
  const bool flux2 = any_key(keys, [](const std::string& k) { return has(k, "_stream_modulation"); }) ||
                     (bfl && is_bfl_flux2_lora(keys) &&
                      (any_key(keys, [](const std::string& k) { return has(k, ".lora_A."); }) ||
                       bfl_shapes_say_flux2(keys)));
  LoraKeyRules rules;
  if (flux2) {
    rules = flux2_lora_rules();
  } else if (bfl || any_key(keys, [](const std::string& k) { return starts_with(k, "lora_transformer_"); })) {
    rules = flux_lora_rules();
  } else if (any_key(keys, [](const std::string& k) {
               return starts_with(k, "diffusion_model.") && (has(k, ".lora_down.") || has(k, ".lora_A."));
             })) {
    rules = qwen_image_lora_rules();
  }
  const std::string format = key_format(without_dora_scales(keys), rules);
  facts.format = format + dora_note(keys);
  const bool flux = format == kBflFlux || format == kMixtureFlux || format == kXlabsFlux || format == kBflFlux2;
  facts.families = families_of(keys, format);
  for (const LoraTensorKey& k : keys) {
    std::string base;
    const Factor f = factor_of(k.key, &base);
    facts.has_alphas = facts.has_alphas || f == Factor::kAlpha;
    if (f != Factor::kDown || k.shape.empty()) continue;
    LoraNamedComponent& c = facts.components[component_of(k.key, flux)];
    const int64_t rank = k.shape[0];  // down / A: [r, in] or [r, in, kh, kw]
    c.min_rank = c.layers ? std::min(c.min_rank, rank) : rank;
    c.max_rank = c.layers ? std::max(c.max_rank, rank) : rank;
    ++c.layers;
  }
  return facts;
}

}  // namespace dpinfer::pipeline

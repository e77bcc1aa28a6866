// The spellings are those of docs/lora.md's survey table that diffusers 0.36's loader mixins read
// (loaders/lora_pipeline.py lora_state_dict; utils/state_dict_utils.py; loaders/lora_conversion_utils.py).
#include "dpinfer/pipeline/loading/lora_nearest_spelling.h"

#include <algorithm>
#include <functional>

#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

struct Spelling {
  std::string name;                   ///< for the answer, with its key form
  std::vector<std::string> prefixes;  ///< a key starts with one of these
  std::vector<std::string> suffixes;  ///< and ends with one of these
};

const std::vector<std::string> kKohyaSuffixes = {".lora_down.weight", ".lora_up.weight", ".alpha"};

std::vector<std::string> with_dots(const std::vector<std::string>& components,
                                   const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> out;
  for (const std::string& c : components)
    if (keep(c)) out.push_back(c + ".");
  return out;
}

/// The spellings `rules`' family reads, in the order a tie goes.
std::vector<Spelling> spellings_for(const LoraKeyRules& rules) {
  const auto any = [](const std::string&) { return true; };
  const auto encoder = [](const std::string& c) { return starts_with(c, "text_encoder"); };
  const auto denoiser = [&](const std::string& c) { return !encoder(c); };
  const bool clip = std::any_of(rules.components.begin(), rules.components.end(), encoder);
  std::vector<Spelling> out = {
      {"diffusers / PEFT (<component>.<module>.lora_A.weight / .lora_B.weight)", with_dots(rules.components, any),
       {".lora_A.weight", ".lora_B.weight", ".alpha", ".lora_magnitude_vector"}},
      {"diffusers' .lora.down names (<denoiser>.<module>.lora.down.weight / .lora.up.weight; not on a text encoder)",
       with_dots(rules.components, denoiser), {".lora.down.weight", ".lora.up.weight"}},
      {"diffusers' attention processors (<attention>.processor.to_q_lora.down.weight ...)",
       with_dots(rules.components, any), {"_lora.down.weight", "_lora.up.weight"}}};
  if (clip)
    out.push_back({"diffusers' lora_linear_layer names (text_encoder.<module>.lora_linear_layer.down.weight / .up.weight; "
                   "text encoders only)",
                   with_dots(rules.components, encoder),
                   {".lora_linear_layer.down.weight", ".lora_linear_layer.up.weight"}});
  if (rules.kohya_unet) {
    std::vector<std::string> prefixes = {"lora_unet_", "lora_te_", "lora_te1_"};
    if (std::count(rules.components.begin(), rules.components.end(), "text_encoder_2")) prefixes.push_back("lora_te2_");
    out.push_back({"kohya / A1111 / LoCon (lora_unet_<module>.lora_down.weight / .lora_up.weight / .alpha)", prefixes,
                   kKohyaSuffixes});
  }
  if (rules.kohya_flux) {
    std::vector<std::string> bfl = {"lora_unet_double_blocks_", "lora_unet_single_blocks_", "diffusion_model.double_blocks.",
                                    "diffusion_model.single_blocks."};
    if (clip) bfl.insert(bfl.end(), {"lora_te_", "text_encoders.clip_l.transformer."});
    out.push_back({"kohya / ComfyUI FLUX.1 in BFL's block names (lora_unet_double_blocks_<i>_img_attn_qkv.lora_down.weight "
                   "...)",
                   bfl, kKohyaSuffixes});
    std::vector<std::string> mixture = {"lora_transformer_"};
    if (clip) mixture.push_back("lora_te1_");
    out.push_back({"FLUX.1 in diffusers' underscored names (lora_transformer_<module>.lora_down.weight / .alpha)", mixture,
                   kKohyaSuffixes});
    out.push_back({"XLabs FLUX.1 (double_blocks.<i>.processor.qkv_lora1.down.weight ...)",
                   {"double_blocks.", "single_blocks.", "diffusion_model.double_blocks.", "diffusion_model.single_blocks."},
                   {"_lora1.down.weight", "_lora1.up.weight", "_lora2.down.weight", "_lora2.up.weight",
                    "_lora.down.weight", "_lora.up.weight"}});
  }
  if (rules.bfl_flux2)
    out.push_back({"ai-toolkit / ComfyUI FLUX.2 in BFL's block names (diffusion_model.double_blocks.<i>.img_attn.qkv"
                   ".lora_A.weight, or lora_down / lora_up; base_model.model. for PEFT's; no alphas)",
                   {"diffusion_model.", "base_model.model."},
                   {".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight"}});
  if (rules.non_diffusers_transformer)
    out.push_back({"the transformer's original names (diffusion_model.<module>.lora_down.weight / .alpha, lora_unet_ "
                   "with '_' for '.', or lora_A / lora_B)",
                   {"diffusion_model.", "lora_unet_"},
                   {".lora_down.weight", ".lora_up.weight", ".alpha", ".lora_A.weight", ".lora_B.weight"}});
  return out;
}

bool any_prefix(const std::string& key, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return starts_with(key, p); });
}

bool any_suffix(const std::string& key, const std::vector<std::string>& suffixes) {
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const std::string& s) { return ends_with(key, s); });
}

std::string joined(const std::vector<std::string>& parts, size_t most) {
  std::string s;
  for (size_t i = 0; i < parts.size() && i < most; ++i) s += (i ? ", " : "") + parts[i];
  return s + (parts.size() > most ? ", ..." : "");
}

}  // namespace

LoraNearestSpelling nearest_lora_spelling(const std::vector<LoraTensorKey>& keys, const LoraKeyRules& rules) {
  LoraNearestSpelling answer;
  if (keys.empty() || rules.components.empty()) return answer;
  const std::vector<Spelling> spellings = spellings_for(rules);
  const Spelling* best = nullptr;
  long best_score = -1;
  for (const Spelling& s : spellings) {
    long score = 0;
    for (const LoraTensorKey& k : keys)
      score += (any_prefix(k.key, s.prefixes) ? 1 : 0) + (any_suffix(k.key, s.suffixes) ? 1 : 0);
    if (score > best_score) best = &s, best_score = score;
  }
  answer.spelling = best->name;
  std::vector<const LoraTensorKey*> off;
  for (const LoraTensorKey& k : keys)
    if (!any_prefix(k.key, best->prefixes) || !any_suffix(k.key, best->suffixes)) off.push_back(&k);
  if (off.empty()) {
    answer.differs = "every key is spelled so (the error says what else is wrong)";
    return answer;
  }
  const std::string& key = off.front()->key;
  const bool prefix = any_prefix(key, best->prefixes), suffix = any_suffix(key, best->suffixes);
  std::string what;
  if (!prefix) what += "starts with none of " + joined(best->prefixes, 4);
  if (!suffix) what += std::string(prefix ? "" : " and ") + "ends with none of " + joined(best->suffixes, 4);
  answer.differs = std::to_string(off.size()) + " of its " + std::to_string(keys.size()) + " keys are not, e.g. " +
                   quote(key, 100) + ", which " + what;
  return answer;
}

}  // namespace dpinfer::pipeline

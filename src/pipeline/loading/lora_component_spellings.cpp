// Ref: diffusers 0.36 loaders/lora_base.py (_load_lora_into_text_encoder), loaders/peft.py (load_lora_adapter's
// first-key test) and utils/state_dict_utils.py
// (convert_state_dict_to_diffusers, convert_state_dict_to_peft, convert_state_dict and their tables).
#include "dpinfer/pipeline/loading/lora_component_spellings.h"

#include <algorithm>
#include <map>
#include <utility>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using RespellTable = std::vector<std::pair<const char*, const char*>>;

// The tables the two steps pick from, in their order (convert_state_dict takes the first pattern a key
// contains and replaces every occurrence of it). Only the rows that can reach a CLIP key are kept: the UNet
// rows of PEFT_TO_DIFFUSERS ("to_q.lora_A" ...) never match a CLIP module's name.
const RespellTable kPeftToDiffusers = {
    {".q_proj.lora_B", ".q_proj.lora_linear_layer.up"},    {".q_proj.lora_A", ".q_proj.lora_linear_layer.down"},
    {".k_proj.lora_B", ".k_proj.lora_linear_layer.up"},    {".k_proj.lora_A", ".k_proj.lora_linear_layer.down"},
    {".v_proj.lora_B", ".v_proj.lora_linear_layer.up"},    {".v_proj.lora_A", ".v_proj.lora_linear_layer.down"},
    {".out_proj.lora_B", ".out_proj.lora_linear_layer.up"}, {".out_proj.lora_A", ".out_proj.lora_linear_layer.down"}};
const RespellTable kOldToDiffusers = {
    {".to_q_lora.up", ".q_proj.lora_linear_layer.up"},     {".to_q_lora.down", ".q_proj.lora_linear_layer.down"},
    {".to_k_lora.up", ".k_proj.lora_linear_layer.up"},     {".to_k_lora.down", ".k_proj.lora_linear_layer.down"},
    {".to_v_lora.up", ".v_proj.lora_linear_layer.up"},     {".to_v_lora.down", ".v_proj.lora_linear_layer.down"},
    {".to_out_lora.up", ".out_proj.lora_linear_layer.up"}, {".to_out_lora.down", ".out_proj.lora_linear_layer.down"},
    {".to_k.lora_magnitude_vector", ".k_proj.lora_magnitude_vector"},
    {".to_v.lora_magnitude_vector", ".v_proj.lora_magnitude_vector"},
    {".to_q.lora_magnitude_vector", ".q_proj.lora_magnitude_vector"},
    {".to_out.lora_magnitude_vector", ".out_proj.lora_magnitude_vector"}};
const RespellTable kDiffusersToPeft = {
    {".q_proj.lora_linear_layer.up", ".q_proj.lora_B"},     {".q_proj.lora_linear_layer.down", ".q_proj.lora_A"},
    {".k_proj.lora_linear_layer.up", ".k_proj.lora_B"},     {".k_proj.lora_linear_layer.down", ".k_proj.lora_A"},
    {".v_proj.lora_linear_layer.up", ".v_proj.lora_B"},     {".v_proj.lora_linear_layer.down", ".v_proj.lora_A"},
    {".out_proj.lora_linear_layer.up", ".out_proj.lora_B"}, {".out_proj.lora_linear_layer.down", ".out_proj.lora_A"},
    {".lora_linear_layer.up", ".lora_B"},                   {".lora_linear_layer.down", ".lora_A"},
    {"text_projection.lora.down.weight", "text_projection.lora_A.weight"},
    {"text_projection.lora.up.weight", "text_projection.lora_B.weight"}};
const RespellTable kOldToPeft = {
    {".to_q_lora.up", ".q_proj.lora_B"},     {".to_q_lora.down", ".q_proj.lora_A"},
    {".to_k_lora.up", ".k_proj.lora_B"},     {".to_k_lora.down", ".k_proj.lora_A"},
    {".to_v_lora.up", ".v_proj.lora_B"},     {".to_v_lora.down", ".v_proj.lora_A"},
    {".to_out_lora.up", ".out_proj.lora_B"}, {".to_out_lora.down", ".out_proj.lora_A"},
    {".lora_linear_layer.up", ".lora_B"},    {".lora_linear_layer.down", ".lora_A"}};

void replace_every(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

bool any_contains(const std::vector<std::string>& keys, const char* piece) {
  return std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return k.find(piece) != std::string::npos; });
}

/// convert_state_dict: KEYS_TO_ALWAYS_REPLACE (".processor." -> "."), then the first row of `table` the key contains.
std::vector<std::string> respell(std::vector<std::string> keys, const RespellTable& table) {
  for (std::string& k : keys) {
    replace_every(k, ".processor.", ".");
    for (const auto& [from, to] : table)
      if (k.find(from) != std::string::npos) {
        replace_every(k, from, to);
        break;
      }
  }
  return keys;
}

bool is_peft_key(const std::string& k) {
  return ends_with(k, ".lora_A.weight") || ends_with(k, ".lora_B.weight") || ends_with(k, ".lora_magnitude_vector") ||
         ends_with(k, ".alpha");
}

}  // namespace

std::vector<std::string> diffusers_text_encoder_respelling(const std::vector<std::string>& encoder_keys) {
  std::vector<std::string> keys = encoder_keys;
  // convert_state_dict_to_diffusers: old patched attention, PEFT, or already diffusers' (unchanged).
  if (any_contains(keys, "to_out_lora")) keys = respell(keys, kOldToDiffusers);
  else if (any_contains(keys, ".lora_A.weight")) keys = respell(keys, kPeftToDiffusers);
  else if (!any_contains(keys, "lora_linear_layer")) return {};
  // convert_state_dict_to_peft: old patched attention or diffusers'.
  if (any_contains(keys, "to_out_lora")) return respell(keys, kOldToPeft);
  if (any_contains(keys, "lora_linear_layer")) return respell(keys, kDiffusersToPeft);
  return {};
}

void check_text_encoder_spellings(const std::vector<LoraTensorKey>& keys, const std::vector<std::string>& components,
                                  const std::string& file) {
  for (const std::string& component : components) {
    if (!starts_with(component, "text_encoder")) continue;
    const std::string prefix = component + ".";
    std::vector<std::string> file_keys, encoder_keys;  // the file's keys of this encoder, and without the prefix
    for (const LoraTensorKey& t : keys)
      if (starts_with(t.key, prefix) && t.key.find("dora_scale") == std::string::npos) file_keys.push_back(t.key);
    if (file_keys.empty()) continue;
    std::sort(file_keys.begin(), file_keys.end());  // safetensors' order, as diffusers reads them
    for (const std::string& k : file_keys) encoder_keys.push_back(k.substr(prefix.size()));
    if (std::all_of(encoder_keys.begin(), encoder_keys.end(), [](const std::string& k) { return ends_with(k, ".alpha"); }))
      continue;  // alphas alone: the layer checks say what is missing
    const std::vector<std::string> respelled = diffusers_text_encoder_respelling(encoder_keys);
    if (respelled.empty()) {
      const bool lora_dot = any_contains(encoder_keys, ".lora.down.weight") || any_contains(encoder_keys, ".lora.up.weight");
      std::string first = file_keys.front();
      for (const std::string& k : file_keys)
        if (!ends_with(k, ".alpha")) {
          first = k;
          break;
        }
      throw InputError(
          quote(file) + ": its " + component + " layers (key " + quote(first, 100) + ") are " +
          (lora_dot ? std::string("in the .lora.down / .lora.up spelling, which diffusers 0.36 cannot load for a text "
                                  "encoder (\"Could not automatically infer state dict type\"; no trainer wrote it there)")
                    : std::string("in PEFT's spelling with no q_proj/k_proj/v_proj/out_proj layer, which diffusers 0.36 "
                                  "cannot load (\"Could not automatically infer state dict type\": it tells a text "
                                  "encoder's spelling by those layers)")) +
          "; dpinfer refuses it as diffusers does: " +
          (lora_dot ? "rename the factors .lora_A.weight / .lora_B.weight"
                    : "re-save the layers as .lora_linear_layer.down.weight / .up.weight, which diffusers reads"));
    }
    std::string read;  // a key the guessed spelling did rename (or PEFT's own)
    for (size_t i = 0; i < respelled.size() && read.empty(); ++i)
      if (is_peft_key(respelled[i]) && !ends_with(respelled[i], ".alpha")) read = file_keys[i];
    for (size_t i = 0; i < respelled.size(); ++i)
      if (!is_peft_key(respelled[i]))
        throw InputError(quote(file) + ": its " + component + " layers mix spellings (key " + quote(file_keys[i], 100) +
                         " beside " + quote(read, 100) +
                         "): diffusers 0.36 respells a text encoder's keys from the one spelling it guesses, leaves this "
                         "key as it is and drops its layer; dpinfer refuses the file rather than merge otherwise: "
                         "write every layer in one spelling (.lora_A.weight / .lora_B.weight)");
  }
}

void check_kohya_text_encoder_spellings(const std::vector<LoraTensorKey>& keys, const std::string& file) {
  // The two state dicts _convert_non_diffusers_lora_to_diffusers fills: lora_te_ and lora_te1_ keys, lora_te2_ keys.
  const std::pair<std::vector<const char*>, const char*> kEncoders[] = {{{"lora_te_", "lora_te1_"}, "text_encoder"},
                                                                         {{"lora_te2_"}, "text_encoder_2"}};
  for (const auto& [prefixes, component] : kEncoders) {
    std::vector<std::string> file_keys, converted;
    for (const LoraTensorKey& t : keys) {
      if (!ends_with(t.key, ".lora_down.weight")) continue;  // each layer once, by its down factor
      for (const char* prefix : prefixes)
        if (starts_with(t.key, prefix)) {
          // _convert_text_encoder_lora_key, rewrite by rewrite.
          std::string name = t.key.substr(std::char_traits<char>::length(prefix));
          std::replace(name.begin(), name.end(), '_', '.');
          for (const auto& [from, to] : RespellTable{{"text.model", "text_model"}, {"self.attn", "self_attn"},
                                              {"q.proj.lora", "to_q_lora"}, {"k.proj.lora", "to_k_lora"},
                                              {"v.proj.lora", "to_v_lora"}, {"out.proj.lora", "to_out_lora"},
                                              {"text.projection", "text_projection"}})
            replace_every(name, from, to);
          if (name.find("self_attn") == std::string::npos && name.find("text_projection") == std::string::npos &&
              name.find("mlp") != std::string::npos)
            replace_every(name, ".lora.", ".lora_linear_layer.");
          file_keys.push_back(t.key);
          converted.push_back(name);
          break;
        }
    }
    if (file_keys.empty()) continue;
    const std::vector<std::string> respelled = diffusers_text_encoder_respelling(converted);
    if (respelled.empty())
      throw InputError(quote(file) + ": its kohya " + component + " layers (key " + quote(file_keys.front(), 100) +
                       ") have neither an out_proj nor an MLP layer, and diffusers 0.36 cannot load such a text encoder "
                       "(\"Could not automatically infer state dict type\": it reads a kohya encoder's q/k/v layers "
                       "only beside its out_proj); dpinfer refuses it as diffusers does");
    for (size_t i = 0; i < respelled.size(); ++i)
      if (!is_peft_key(respelled[i]))
        throw InputError(quote(file) + ": its kohya " + component + " layer " + quote(file_keys[i], 100) +
                         " is one diffusers 0.36 drops (it reads a kohya encoder's q/k/v layers only beside an out_proj "
                         "layer, and no other module outside the attention and MLP), after its alpha counted for the "
                         "others; dpinfer refuses the file rather than merge otherwise: drop the layer, or add the "
                         "encoder's out_proj layers");
  }
}

void check_denoiser_spellings(const std::vector<LoraTensorKey>& keys, const std::string& denoiser,
                              const std::string& file) {
  const std::string prefix = denoiser + ".";
  std::vector<std::string> own;
  for (const LoraTensorKey& t : keys)
    if (starts_with(t.key, prefix) && t.key.find("dora_scale") == std::string::npos) own.push_back(t.key);
  if (own.empty()) return;
  std::sort(own.begin(), own.end());
  if (own.front().find("lora_A") == std::string::npos) return;  // every key is respelled (UNET_TO_DIFFUSERS)
  for (const std::string& k : own)
    if (ends_with(k, ".lora.down.weight") || ends_with(k, ".lora.up.weight") || ends_with(k, "_lora.down.weight") ||
        ends_with(k, "_lora.up.weight"))
      throw InputError(quote(file) + ": its " + denoiser + " layers mix spellings (key " + quote(k, 100) + " beside " +
                       quote(own.front(), 100) + "): diffusers 0.36's load_lora_adapter respells the keys only when "
                       "the first one has no lora_A, so it leaves this key as it is and drops its layer; dpinfer "
                       "refuses the file rather than merge otherwise: write every layer in one spelling "
                       "(.lora_A.weight / .lora_B.weight)");
}

}  // namespace dpinfer::pipeline

// Ref: diffusers 0.36 loaders/lora_conversion_utils.py _convert_kohya_flux_lora_to_diffusers (its
// ComfyUI branch, _custom_replace, _convert_sd_scripts_to_ai_toolkit, _convert_to_ai_toolkit,
// _convert_to_ai_toolkit_cat, _convert_text_encoder_lora_key), loaders/lora_base.py
// _load_lora_into_text_encoder and utils/state_dict_utils.py convert_state_dict_to_diffusers.
#include "dpinfer/pipeline/loading/lora_flux_keys.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// A BFL block layer and the diffusers modules it is, in _convert_sd_scripts_to_ai_toolkit's order
/// (the order diffusers lists the converted layers in). Several modules: a fused projection whose up
/// factor's rows are theirs in turn.
struct BflLayer {
  const char* bfl;  ///< underscored, after "double_blocks_<i>_" / "single_blocks_<i>_"
  std::vector<std::string> modules;  ///< after "transformer_blocks.<i>." / "single_transformer_blocks.<i>."
};
const std::vector<BflLayer>& bfl_double_block_layers() {
  static const std::vector<BflLayer> t = {
      {"img_attn_proj", {"attn.to_out.0"}},
      {"img_attn_qkv", {"attn.to_q", "attn.to_k", "attn.to_v"}},
      {"img_mlp_0", {"ff.net.0.proj"}},
      {"img_mlp_2", {"ff.net.2"}},
      {"img_mod_lin", {"norm1.linear"}},
      {"txt_attn_proj", {"attn.to_add_out"}},
      {"txt_attn_qkv", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}},
      {"txt_mlp_0", {"ff_context.net.0.proj"}},
      {"txt_mlp_2", {"ff_context.net.2"}},
      {"txt_mod_lin", {"norm1_context.linear"}}};
  return t;
}
const std::vector<BflLayer>& bfl_single_block_layers() {
  static const std::vector<BflLayer> t = {{"linear1", {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}},
                                          {"linear2", {"proj_out"}},
                                          {"modulation_lin", {"norm.linear"}}};
  return t;
}

/// lora_unet_ layers outside the blocks that diffusers converts to names without "transformer.", which
/// load_lora_into_transformer then never reads (so neither is final_layer's shift/scale swap applied).
constexpr const char* kDroppedTransformerLayers[] = {
    "guidance_in_in_layer", "guidance_in_out_layer", "img_in",           "txt_in",
    "time_in_in_layer",     "time_in_out_layer",     "vector_in_in_layer", "vector_in_out_layer",
    "final_layer_linear",   "final_layer_adaLN_modulation_1"};

/// CLIP's LoRA-able modules of one encoder layer in CLIPEncoderLayer's named_modules order
/// (transformers 4.57: self_attn's k, v, q, out projections, then mlp's fc1, fc2): the order in
/// which _load_lora_into_text_encoder collects the ranks.
constexpr const char* kClipLayerModules[] = {"self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj",
                                             "self_attn.out_proj", "mlp.fc1", "mlp.fc2"};

constexpr const char* kOtherTextEncoders =
    "text-encoder layers other than CLIP's lora_te_ ones (lora_te1_, lora_te2_, T5)";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

bool parse_block(const std::string& name, const std::string& prefix, int64_t* index, std::string* rest) {
  if (!starts_with(name, prefix)) return false;
  const size_t digits = name.find('_', prefix.size());
  if (digits == std::string::npos || digits == prefix.size() || digits - prefix.size() > 6) return false;
  const std::string number = name.substr(prefix.size(), digits - prefix.size());
  if (number.find_first_not_of("0123456789") != std::string::npos) return false;
  *index = std::stoll(number);
  *rest = name.substr(digits + 1);
  return true;
}

/// One layer's keys in the file, by its converted (underscored) name.
struct BflGroup {
  std::optional<std::string> down, up, alpha;
  std::string first_key;
};

/// A layer found, with its place in diffusers' order.
struct BflFound {
  std::tuple<int, int64_t, size_t, size_t> order;  ///< (double 0 / single 1 / CLIP 2, block, layer, part)
  LoraLayer layer;
};

}  // namespace

std::vector<LoraLayer> stacked_lora_layers(const LoraLayer& layer, const std::string& prefix,
                                           const std::vector<std::string>& modules, const LoraModuleTable& table,
                                           const std::vector<int64_t>& down, const std::vector<int64_t>& up,
                                           const std::string& where, const std::string& name) {
  auto component = table.find(layer.component);
  if (component == table.end() || modules.empty()) return {};
  // The parts' weights and their rows of the (fused) up factor.
  std::vector<const std::vector<int64_t>*> weights;
  int64_t rows = 0;
  for (const std::string& m : modules) {
    auto it = component->second.find(prefix + m);
    if (it == component->second.end() || it->second.size() != 2) return {};
    weights.push_back(&it->second);
    rows += it->second[0];
  }
  std::string target = layer.component + "." + prefix + modules[0] + ".weight";
  for (size_t p = 1; p < modules.size(); ++p)
    target += std::string(p + 1 < modules.size() ? ", " : " and ") + modules[p] + ".weight";
  if (modules.size() > 1) {
    for (const auto* w : weights)
      if ((*w)[1] != (*weights[0])[1])
        throw InputError(where + ": the modules of " + quote(name, 80) + " (" + target + ") take inputs of different "
                         "sizes; not a FLUX.1 model");
    target += " stacked";
  }
  check_lora_factors_fit(where, name, down, up, target, {rows, (*weights[0])[1]});
  std::vector<LoraLayer> parts;
  int64_t begin = 0;
  for (size_t p = 0; p < modules.size(); ++p) {
    LoraLayer l = layer;
    l.module = prefix + modules[p];
    if (modules.size() > 1) {
      l.up_rows = LoraRows{begin, begin + (*weights[p])[0]};
      l.part = static_cast<int>(p);
      l.parts = static_cast<int>(modules.size());
    }
    begin += (*weights[p])[0];
    parts.push_back(std::move(l));
  }
  return parts;
}

bool is_kohya_flux_lora(const std::vector<LoraTensorKey>& keys) {
  bool down = false;
  for (const LoraTensorKey& k : keys) {
    if (starts_with(k.key, "transformer.")) return false;
    if (starts_with(k.key, "lora_transformer_") && (k.key.find("lora_down") != std::string::npos ||
                                                    k.key.find("lora_up") != std::string::npos ||
                                                    k.key.find("alpha") != std::string::npos))
      return false;
    down = down || k.key.find(".lora_down.weight") != std::string::npos;
  }
  return down;
}

std::vector<LoraLayer> map_kohya_flux_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                                const LoraModelFacts& facts, const std::string& file,
                                                std::vector<std::string>* ignored) {
  const std::string where = quote(file);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::string> dropped;  // what -> an example key
  const auto drop = [&](const std::string& what, const std::string& key) { dropped.emplace(what, key); };

  // The ComfyUI renames, then the filters, in diffusers' order.
  std::vector<std::pair<std::string, std::string>> renamed;  // (converted key, file key)
  for (const LoraTensorKey& t : keys) {
    shapes[t.key] = t.shape;
    std::string k = t.key;
    replace_all(k, "diffusion_model.", "lora_unet_");
    replace_all(k, "text_encoders.clip_l.transformer.", "lora_te_");
    renamed.emplace_back(k, t.key);
  }
  bool norm_diff = false;
  for (const auto& [k, key] : renamed)
    norm_diff = norm_diff || (k.find(".norm") != std::string::npos && k.find(".diff") != std::string::npos);
  std::map<std::string, BflGroup> groups;
  for (const auto& [k, key] : renamed) {
    if (k.find("position_embedding") != std::string::npos) { drop("CLIP position_embedding layers", key); continue; }
    if (starts_with(k, "text_encoders.t5xxl.transformer.")) { drop("T5 layers", key); continue; }
    if (k.find(".diff_b") != std::string::npos && (starts_with(k, "lora_unet_") || starts_with(k, "lora_te_"))) {
      drop("bias differences (.diff_b)", key);
      continue;
    }
    if (norm_diff && (k.find(".norm") != std::string::npos || k.find(".diff") != std::string::npos)) {
      drop("norm differences (.norm ... .diff)", key);
      continue;
    }
    if (!starts_with(k, "lora_unet_") && !starts_with(k, "lora_te_")) {
      if (starts_with(k, "lora_te") || starts_with(k, "text_encoders.")) {
        drop(kOtherTextEncoders, key);
        continue;
      }
      throw InputError(where + ": key " + quote(key, 80) + " is not a kohya FLUX.1 LoRA key (expected lora_unet_, "
                       "lora_te_, diffusion_model. or text_encoders.clip_l.transformer. keys, as the file's "
                       ".lora_down.weight keys make it); is the file damaged?");
    }
    // _custom_replace: the dots before the factor's name become '_'.
    std::string base, slot;
    for (const char* suffix : {".lora_down.weight", ".lora_up.weight", ".alpha"})
      if (ends_with(k, suffix)) {
        base = k.substr(0, k.size() - std::char_traits<char>::length(suffix));
        slot = suffix;
      }
    if (base.empty())
      throw InputError(where + ": key " + quote(key, 80) + " is not a LoRA factor (expected .lora_down.weight, "
                       ".lora_up.weight or .alpha)");
    std::replace(base.begin(), base.end(), '.', '_');
    if (starts_with(base, "lora_te_") && base.find("text_projection") != std::string::npos) {
      drop("CLIP text_projection layers", key);
      continue;
    }
    BflGroup& g = groups[base];
    if (g.first_key.empty()) g.first_key = key;
    (slot == ".alpha" ? g.alpha : slot == ".lora_down.weight" ? g.down : g.up) = key;
  }

  const auto module_shape = [&](const std::string& component,
                                const std::string& module) -> const std::vector<int64_t>* {
    auto c = modules.find(component);
    if (c == modules.end()) return nullptr;
    auto m = c->second.find(module);
    return m == c->second.end() ? nullptr : &m->second;
  };
  std::map<std::string, std::string> clip_underscored;  // CLIP's underscored module names
  if (auto c = modules.find("text_encoder"); c != modules.end())
    for (const auto& [module, shape] : c->second) {
      std::string u = module;
      std::replace(u.begin(), u.end(), '.', '_');
      clip_underscored[u] = module;
    }

  std::vector<BflFound> found;
  std::vector<std::string> unmatched;
  bool clip_attention = false, clip_out_proj = false, clip_mlp = false;
  for (const auto& group : groups) {
    const std::string& base = group.first;  // not a structured binding: the lambdas below capture it
    const BflGroup& g = group.second;
    if (!g.down || !g.up) {
      if (!g.down && !g.up) throw InputError(where + ": " + quote(*g.alpha, 80) + " is an alpha of no layer (no "
                                             ".lora_down.weight or .lora_up.weight beside it); the file is incomplete");
      throw InputError(where + ": layer " + quote(base, 80) + " has its " + (g.down ? "lora_down" : "lora_up") +
                       " weight but not its " + (g.down ? "lora_up" : "lora_down") + " weight; the file is incomplete");
    }
    const std::vector<int64_t>& down = shapes[*g.down];
    const std::vector<int64_t>& up = shapes[*g.up];
    if (g.alpha) check_lora_alpha_shape(where, *g.alpha, shapes[*g.alpha]);
    const auto make = [&](const std::string& component, const std::string& module) {
      LoraLayer l{component, module, *g.down, *g.up, g.alpha, down.empty() ? 0 : down[0]};
      l.alpha_in_factors = true;
      return l;
    };
    if (starts_with(base, "lora_te_")) {
      auto it = clip_underscored.find(base.substr(8));
      if (it == clip_underscored.end()) {
        unmatched.push_back(g.first_key);
        continue;
      }
      const std::string& module = it->second;
      const std::vector<int64_t>& w = *module_shape("text_encoder", module);
      check_lora_factors_fit(where, base, down, up, "text_encoder." + module + ".weight", w);
      int64_t index = -1;
      std::string rest;
      size_t position = std::size(kClipLayerModules);
      if (parse_block(base.substr(8), "text_model_encoder_layers_", &index, &rest))
        for (size_t p = 0; p < std::size(kClipLayerModules); ++p) {
          std::string u = kClipLayerModules[p];
          std::replace(u.begin(), u.end(), '.', '_');
          if (rest == u) position = p;
        }
      const bool attention = module.find(".self_attn.") != std::string::npos;
      clip_attention = clip_attention || attention;
      clip_out_proj = clip_out_proj || ends_with(module, ".self_attn.out_proj");
      clip_mlp = clip_mlp || module.find(".mlp.") != std::string::npos;
      found.push_back({{2, index, position, 0}, make("text_encoder", module)});
      continue;
    }
    const std::string name = base.substr(10);  // after "lora_unet_"
    if (std::find_if(std::begin(kDroppedTransformerLayers), std::end(kDroppedTransformerLayers),
                     [&](const char* d) { return name == d; }) != std::end(kDroppedTransformerLayers)) {
      drop("embedder and final-layer layers (img_in, txt_in, time_in, vector_in, guidance_in, final_layer)",
           g.first_key);
      continue;
    }
    int64_t block = 0;
    std::string rest;
    const bool is_double = parse_block(name, "double_blocks_", &block, &rest);
    if (!is_double && !parse_block(name, "single_blocks_", &block, &rest)) {
      unmatched.push_back(g.first_key);
      continue;
    }
    const std::vector<BflLayer>& table = is_double ? bfl_double_block_layers() : bfl_single_block_layers();
    const std::string prefix = (is_double ? "transformer_blocks." : "single_transformer_blocks.") +
                               std::to_string(block) + ".";
    auto entry = std::find_if(table.begin(), table.end(), [&](const BflLayer& b) { return rest == b.bfl; });
    if (entry == table.end()) {
      unmatched.push_back(g.first_key);
      continue;
    }
    LoraLayer proto = make("transformer", "");
    proto.alpha_divided_in_its_dtype = entry->modules.size() > 1;  // _convert_to_ai_toolkit_cat divides the alpha tensor
    std::vector<LoraLayer> parts = stacked_lora_layers(proto, prefix, entry->modules, modules, down, up, where, base);
    if (parts.empty()) {
      unmatched.push_back(g.first_key);
      continue;
    }
    for (size_t p = 0; p < parts.size(); ++p)
      found.push_back({{is_double ? 0 : 1, block, static_cast<size_t>(entry - table.begin()), p}, std::move(parts[p])});
  }

  const std::string label = facts.family_label;
  if (!unmatched.empty()) {
    std::string examples;
    for (size_t k = 0; k < unmatched.size() && k < 3; ++k) examples += (k ? ", " : "") + quote(unmatched[k], 80);
    throw InputError(where + ": a kohya FLUX.1 LoRA, " + std::to_string(unmatched.size()) + " of whose layers match no "
                     "weight of this " + label + " model, e.g. " + examples + "; it was made for another model (or "
                     "another version of it): use a LoRA made for this one");
  }
  // convert_state_dict_to_diffusers: diffusers reads CLIP's attention layers in its old names, which it
  // recognises by "to_out_lora" (an out_proj layer); without one the mlp layers alone load, and without
  // those the file fails to load.
  if (clip_attention && !clip_out_proj) {
    if (!clip_mlp)
      throw InputError(where + ": its CLIP (lora_te_) layers are q/k/v projections without an out_proj layer, from "
                       "which diffusers 0.36 cannot load the file (\"Could not automatically infer state dict type\"); "
                       "drop those layers from the file or add an out_proj one");
    found.erase(std::remove_if(found.begin(), found.end(),
                               [&](const BflFound& f) {
                                 const bool gone = f.layer.component == "text_encoder" &&
                                                   f.layer.module.find(".self_attn.") != std::string::npos;
                                 if (gone)
                                   drop("CLIP attention layers without an out_proj layer beside them", f.layer.down_key);
                                 return gone;
                               }),
                found.end());
  }
  if (found.empty() && dropped.count(kOtherTextEncoders))
    throw InputError(where + ": its only layers are text-encoder layers named lora_te1_ / lora_te2_ (e.g. " +
                     quote(dropped.at(kOtherTextEncoders), 80) + "), which diffusers 0.36 drops for FLUX.1 (it reads "
                     "CLIP's as lora_te_): a LoRA for a UNet model (SDXL), or nothing to merge");
  if (found.empty())
    throw InputError(where + ": a kohya FLUX.1 LoRA of which diffusers 0.36 reads no layer (it has only " +
                     (dropped.empty() ? std::string("nothing") : dropped.begin()->first) + "); nothing to merge");
  std::stable_sort(found.begin(), found.end(), [](const BflFound& a, const BflFound& b) { return a.order < b.order; });
  if (ignored)
    for (const auto& [what, key] : dropped)
      ignored->push_back(what + " (e.g. " + quote(key, 80) + "), which diffusers 0.36 does not read from a kohya FLUX.1 "
                         "LoRA either");
  std::vector<LoraLayer> layers;
  for (BflFound& f : found) layers.push_back(std::move(f.layer));
  return layers;
}

}  // namespace dpinfer::pipeline

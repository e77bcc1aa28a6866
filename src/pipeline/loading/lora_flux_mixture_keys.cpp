// Ref: diffusers 0.36 loaders/lora_conversion_utils.py _convert_kohya_flux_lora_to_diffusers
// (has_peft_state_dict, has_mixture, _convert_mixture_state_dict_to_diffusers and its _convert),
// loaders/lora_base.py _load_lora_into_text_encoder, utils/peft_utils.py get_peft_kwargs.
#include "dpinfer/pipeline/loading/lora_flux_mixture_keys.h"

#include <algorithm>
#include <map>
#include <optional>

#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kTransformer = "lora_transformer_";
constexpr const char* kClip = "lora_te1_";

/// The top-level lora_transformer_ layers and their modules, in the converter's order of tests (by prefix).
constexpr std::pair<const char*, const char*> kTopLevel[] = {{"lora_transformer_context_embedder", "context_embedder"},
                                                             {"lora_transformer_norm_out_linear", "norm_out.linear"},
                                                             {"lora_transformer_proj_out", "proj_out"},
                                                             {"lora_transformer_x_embedder", "x_embedder"}};
/// Those whose name ends with a number: "<prefix><i>" is "<module>_<i>".
constexpr std::pair<const char*, const char*> kNumbered[] = {
    {"lora_transformer_time_text_embed_guidance_embedder_linear_", "time_text_embed.guidance_embedder.linear_"},
    {"lora_transformer_time_text_embed_text_embedder_linear_", "time_text_embed.text_embedder.linear_"},
    {"lora_transformer_time_text_embed_timestep_embedder_linear_", "time_text_embed.timestep_embedder.linear_"}};

/// One layer's keys in the file, by its name (the keys without the factor's suffix).
struct MixtureGroup {
  std::optional<std::string> down, up, alpha;
};

/// The converter's module for transformer layer `k` (a lora_transformer_ name). Throws InputError, naming
/// `where` and `k`, where the converter raises.
std::string transformer_module(const std::string& k, const std::string& where) {
  const auto refuse = [&](const std::string& why) {
    return InputError(where + ": layer " + quote(k, 80) + " in diffusers' underscored FLUX.1 names " + why +
                      ", on which diffusers 0.36 fails too (_convert_mixture_state_dict_to_diffusers)");
  };
  std::string module;
  bool found = false;
  // int(k.split(head)[-1].split("_")[0]): the number after the head.
  for (const auto& [head, to] : {std::pair<std::string, std::string>{"lora_transformer_single_transformer_blocks_",
                                                                     "single_transformer_blocks."},
                                 {"lora_transformer_transformer_blocks_", "transformer_blocks."}})
    if (!found && starts_with(k, head)) {
      const std::string tail = k.substr(k.rfind(head) + head.size());
      const std::optional<int64_t> n = key_rules::parse_index(tail.substr(0, tail.find('_')));
      if (!n) throw refuse("has no block number after " + head);
      module = to + std::to_string(*n);
      found = true;
    }
  for (const auto& [head, to] : kTopLevel)
    if (!found && starts_with(k, head)) {
      module = to;
      found = true;
    }
  for (const auto& [head, to] : kNumbered)
    if (!found && starts_with(k, head)) {
      const std::string tail = k.substr(k.rfind(head) + std::char_traits<char>::length(head));
      const std::optional<int64_t> n = key_rules::parse_index(tail);
      if (!n) throw refuse(std::string("has no number after ") + head);
      module = to + std::to_string(*n);
      found = true;
    }
  if (!found) throw refuse("names no module the converter knows (transformer_blocks, single_transformer_blocks, "
                           "context_embedder, norm_out_linear, proj_out, x_embedder, time_text_embed)");
  if (k.find("attn_") == std::string::npos) return module;
  const std::string remaining = k.substr(k.rfind("attn_") + 5);
  if (k.find("_to_out_0") != std::string::npos) return module + ".attn.to_out.0";
  if (k.find("_to_add_out") != std::string::npos) return module + ".attn.to_add_out";
  for (const char* p : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"})
    if (k.find(p) != std::string::npos) return module + ".attn." + remaining;
  return module;
}

/// The converter's module for CLIP layer `k` (a lora_te1_ name), or nullopt where it leaves the layer over.
std::optional<std::string> clip_module(const std::string& k) {
  const std::string head = "lora_te1_text_model_encoder_layers_";  // re.search(head + r"(\d+)")
  if (!starts_with(k, head)) return std::nullopt;
  const size_t digits = k.find_first_not_of("0123456789", head.size());
  const std::optional<int64_t> n = key_rules::parse_index(k.substr(head.size(), digits - head.size()));
  if (!n) return std::nullopt;
  std::string module = "text_model.encoder.layers." + std::to_string(*n);
  if (k.find("attn") != std::string::npos) {
    for (const char* p : {"q_proj", "k_proj", "v_proj", "out_proj"})
      if (k.find(p) != std::string::npos) return module + ".self_attn." + p;
  } else if (k.find("mlp") != std::string::npos) {
    for (const char* p : {"fc1", "fc2"})
      if (k.find(p) != std::string::npos) return module + ".mlp." + p;
  }
  return module;
}

}  // namespace

bool is_mixture_flux_lora(const std::vector<LoraTensorKey>& keys) {
  bool down = false, mixture = false;
  for (const LoraTensorKey& k : keys) {
    if (starts_with(k.key, "transformer.")) return false;
    down = down || k.key.find(".lora_down.weight") != std::string::npos;
    mixture = mixture || (starts_with(k.key, kTransformer) && (k.key.find("lora_down") != std::string::npos ||
                                                               k.key.find("lora_up") != std::string::npos ||
                                                               k.key.find("alpha") != std::string::npos));
  }
  return down && mixture;
}

std::vector<LoraLayer> map_mixture_flux_lora_keys(const std::vector<LoraTensorKey>& keys,
                                                  const LoraModuleTable& modules, const LoraModelFacts& facts,
                                                  const std::string& file, std::vector<std::string>* ignored) {
  const std::string where = quote(file);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, MixtureGroup> groups;
  std::string unet_example;
  for (const LoraTensorKey& t : keys) {
    shapes[t.key] = t.shape;
    if (starts_with(t.key, "lora_unet_")) {  // dropped, when nothing else is left over
      if (unet_example.empty()) unet_example = t.key;
      continue;
    }
    std::string base, slot;
    for (const char* suffix : {".lora_down.weight", ".lora_up.weight", ".alpha"})
      if (ends_with(t.key, suffix)) {
        slot = suffix;
        base = t.key.substr(0, t.key.size() - slot.size());
      }
    if (!starts_with(base.empty() ? t.key : base, kTransformer) && !starts_with(base.empty() ? t.key : base, kClip))
      throw InputError(where + ": key " + quote(t.key, 80) + " beside layers in diffusers' underscored FLUX.1 names "
                       "(lora_transformer_), where diffusers 0.36 reads only lora_transformer_, lora_te1_ and "
                       "lora_unet_ keys and fails on others; drop it from the file");
    if (slot.empty())
      throw InputError(where + ": key " + quote(t.key, 80) + " is not a LoRA factor (expected .lora_down.weight, "
                       ".lora_up.weight or .alpha), on which diffusers 0.36 fails too");
    MixtureGroup& g = groups[base];
    (slot == ".alpha" ? g.alpha : slot == ".lora_down.weight" ? g.down : g.up) = t.key;
  }

  std::vector<LoraLayer> layers;
  std::vector<std::string> unmatched;
  std::map<std::string, std::string> targets;  // component.module -> the layer that changes it
  for (const auto& [base, g] : groups) {
    const bool clip = starts_with(base, kClip);
    std::string module;
    if (clip) {
      const std::optional<std::string> m = clip_module(base);
      if (!m)
        throw InputError(where + ": CLIP layer " + quote(base, 80) + " is not lora_te1_text_model_encoder_layers_<i>_..., "
                         "which diffusers 0.36 leaves unconverted and then fails on; drop it from the file");
      module = *m;
    } else {
      module = transformer_module(base, where);
    }
    for (const auto& [factor, what] : {std::pair<const std::optional<std::string>*, const char*>{&g.down, ".lora_down.weight"},
                                       {&g.up, ".lora_up.weight"},
                                       {&g.alpha, ".alpha"}})
      if (!*factor)
        throw InputError(where + ": layer " + quote(base, 80) + " has no " + what + ", which diffusers 0.36 requires "
                         "of every layer in its underscored FLUX.1 names (lora_transformer_, lora_te1_); the file is "
                         "incomplete");
    const std::string component = clip ? "text_encoder" : "transformer";
    if (clip && !modules.count(component))  // Chroma: its T5 matches none, and get_peft_kwargs fails (IndexError)
      throw InputError(where + ": CLIP layer " + quote(base, 80) + " in a LoRA in diffusers' underscored FLUX.1 names, "
                       "but this " + facts.family_label + " model has no CLIP text encoder, and diffusers 0.36 fails to "
                       "load the file on it too; drop the lora_te1_ layers from the file");
    const std::vector<int64_t>* w = nullptr;
    if (auto c = modules.find(component); c != modules.end())
      if (auto m = c->second.find(module); m != c->second.end()) w = &m->second;
    if (!w) {
      const bool block_itself = (starts_with(module, "transformer_blocks.") ||
                                 starts_with(module, "single_transformer_blocks.")) &&
                                std::count(module.begin(), module.end(), '.') == 1;
      if (!clip && block_itself)
        throw InputError(where + ": layer " + quote(base, 80) + " is not an attention projection of its block, so "
                         "diffusers 0.36's converter names the block itself (" + module + "), and fails to load it; "
                         "drop the layer from the file");
      unmatched.push_back(*g.down);
      continue;
    }
    if (auto [it, fresh] = targets.emplace(component + "." + module, base); !fresh)
      throw InputError(where + ": layers " + quote(it->second, 80) + " and " + quote(base, 80) + " both become " +
                       component + "." + module + " in diffusers 0.36's conversion, which keeps one of them; drop the "
                       "other from the file");
    const std::vector<int64_t>& down = shapes[*g.down];
    const std::vector<int64_t>& up = shapes[*g.up];
    check_lora_factors_fit(where, base, down, up, component + "." + module + ".weight", *w);
    check_lora_alpha_shape(where, *g.alpha, shapes[*g.alpha]);
    LoraLayer l{component, module, *g.down, *g.up, g.alpha, down[0]};
    l.alpha_in_factors = true;  // _convert: alpha / rank split between the factors
    l.alpha_divided_in_its_dtype = true;  // scale = alpha / lora_rank, alpha a tensor
    layers.push_back(std::move(l));
  }
  const std::string label = facts.family_label;
  if (!unmatched.empty())
    throw InputError(where + ": a LoRA in diffusers' underscored FLUX.1 names, " + std::to_string(unmatched.size()) +
                     " of whose layers match no weight of this " + label + " model, e.g. " + quote(unmatched.front(), 80) +
                     "; it was made for another model (or another version of it): use a LoRA made for this one");
  // PEFT's lora_alpha is the first transformer layer's rank in a Python set's order: one rank, or no answer.
  const LoraLayer* first = nullptr;
  for (const LoraLayer& l : layers)
    if (l.component == "transformer") {
      if (first && l.rank != first->rank)
        throw InputError(where + ": its transformer layers have different ranks (" + std::to_string(first->rank) +
                         " for " + quote(first->down_key, 80) + ", " + std::to_string(l.rank) + " for " +
                         quote(l.down_key, 80) + "): diffusers 0.36 lists this format's layers in a Python set's "
                         "order, so the scaling it gives them changes from run to run and there is no result to "
                         "match; re-save the LoRA with one rank, or in diffusers' names (save_lora_weights)");
      first = first ? first : &l;
    }
  if (ignored && !unet_example.empty())
    ignored->push_back("its lora_unet_ keys (e.g. " + quote(unet_example, 80) + "), which diffusers 0.36 drops from a "
                       "LoRA in its underscored FLUX.1 names (lora_transformer_) too");
  // Any order of the transformer's layers gives the same config (one rank); CLIP's are ranked in
  // named_modules order (LoraMerger::infer_alphas). Sorted, for a stable answer.
  std::sort(layers.begin(), layers.end(), [](const LoraLayer& a, const LoraLayer& b) { return a.up_key < b.up_key; });
  return layers;
}

}  // namespace dpinfer::pipeline

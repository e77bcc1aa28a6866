// Ref: diffusers 0.36 loaders/lora_conversion_utils.py _convert_xlabs_flux_lora_to_diffusers (handle_qkv),
// loaders/lora_pipeline.py FluxLoraLoaderMixin.lora_state_dict and load_lora_weights
// (_maybe_expand_lora_state_dict), utils/peft_utils.py get_peft_kwargs.
#include "dpinfer/pipeline/loading/lora_flux_xlabs_keys.h"

#include <algorithm>
#include <map>
#include <optional>

#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/pipeline/loading/lora_flux_keys.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// An XLabs processor layer and the diffusers modules it is (several: a fused q/k/v projection whose up
/// factor's rows are theirs in equal thirds, handle_qkv's order).
struct XlabsLayer {
  const char* name;  ///< after "<block>.processor."
  std::vector<std::string> modules;  ///< after "transformer_blocks.<i>." / "single_transformer_blocks.<i>."
};
const std::vector<XlabsLayer>& xlabs_double_block_layers() {
  static const std::vector<XlabsLayer> t = {{"proj_lora1", {"attn.to_out.0"}},
                                            {"proj_lora2", {"attn.to_add_out"}},
                                            {"qkv_lora1", {"attn.to_q", "attn.to_k", "attn.to_v"}},
                                            {"qkv_lora2", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}}};
  return t;
}
const std::vector<XlabsLayer>& xlabs_single_block_layers() {
  static const std::vector<XlabsLayer> t = {{"qkv_lora", {"attn.to_q", "attn.to_k", "attn.to_v"}},
                                            {"proj_lora", {"proj_out"}}};
  return t;
}

constexpr const char* kExpected =
    "expected [diffusion_model.]double_blocks.<i>.processor.{qkv_lora1,qkv_lora2,proj_lora1,proj_lora2}.down.weight / "
    ".up.weight or single_blocks.<i>.processor.{qkv_lora,proj_lora}...";

/// One layer's keys in the file.
struct XlabsGroup {
  bool is_double = false;
  int64_t block = 0;
  const XlabsLayer* layer = nullptr;
  std::optional<std::string> down, up;
};

}  // namespace

bool is_xlabs_flux_lora(const std::vector<LoraTensorKey>& keys) {
  bool processor = false;
  for (const LoraTensorKey& k : keys) {
    if (k.key.find(".lora_down.weight") != std::string::npos) return false;
    processor = processor || k.key.find("processor") != std::string::npos;
  }
  return processor;
}

std::vector<LoraLayer> map_xlabs_flux_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                                const LoraModelFacts& facts, const std::string& file,
                                                std::vector<std::string>* ignored) {
  const std::string where = quote(file);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, XlabsGroup> groups;  // by "<double|single>_blocks.<i>.processor.<layer>"
  std::string ignored_example;
  for (const LoraTensorKey& t : keys) {
    shapes[t.key] = t.shape;
    std::string k = t.key;
    // The converter's startswith(("diffusion_model.double_blocks", "double_blocks")) and its single twin.
    if (starts_with(k, "diffusion_model.double_blocks") || starts_with(k, "diffusion_model.single_blocks"))
      k = k.substr(16);
    const bool is_double = starts_with(k, "double_blocks");
    if (!is_double && !starts_with(k, "single_blocks")) {
      // Kept unconverted: diffusers reads the transformer. / text_encoder. ones as its own names.
      if (starts_with(k, "transformer.") || starts_with(k, "text_encoder."))
        throw InputError(where + ": an XLabs FLUX.1 LoRA (\"processor\" keys) with a key in diffusers' names, " +
                         quote(t.key, 80) + ", beside them, which diffusers 0.36 would read as well; dpinfer reads one "
                         "format per file: split the file in two");
      if (ignored_example.empty()) ignored_example = t.key;
      continue;
    }
    const auto block = key_rules::indexed(k, is_double ? "double_blocks." : "single_blocks.");
    const std::string processor = "processor.";
    std::string rest = block ? block->second : std::string();
    std::string slot;
    for (const char* suffix : {".down.weight", ".up.weight"})
      if (ends_with(rest, suffix)) {
        slot = suffix;
        rest = rest.substr(0, rest.size() - slot.size());
      }
    const std::vector<XlabsLayer>& table = is_double ? xlabs_double_block_layers() : xlabs_single_block_layers();
    auto entry = std::find_if(table.begin(), table.end(),
                              [&](const XlabsLayer& l) { return rest == processor + l.name; });
    if (!block || slot.empty() || entry == table.end())
      throw InputError(where + ": key " + quote(t.key, 80) + " is not an XLabs FLUX.1 LoRA factor (" + kExpected +
                       "), which diffusers 0.36 cannot convert either");
    const std::string name = std::string(is_double ? "double_blocks." : "single_blocks.") +
                             std::to_string(block->first) + "." + rest;
    XlabsGroup& g = groups[name];
    g.is_double = is_double;
    g.block = block->first;
    g.layer = &*entry;
    std::optional<std::string>& factor = slot == ".down.weight" ? g.down : g.up;
    if (factor)
      throw InputError(where + ": " + quote(*factor, 80) + " and " + quote(t.key, 80) + " are the same XLabs layer "
                       "(with and without \"diffusion_model.\"); diffusers 0.36 would keep one of them: drop the other");
    factor = t.key;
  }

  std::vector<std::pair<std::string, LoraLayer>> found;  // (the key at which diffusers lists the layer, layer)
  std::vector<std::string> unmatched;
  for (const auto& [name, g] : groups) {
    if (!g.down || !g.up)
      throw InputError(where + ": XLabs layer " + quote(name, 80) + " has its " + (g.down ? "down" : "up") +
                       " weight but not its " + (g.down ? "up" : "down") + " weight, without which diffusers 0.36 "
                       "cannot load the file either; the file is incomplete");
    const std::vector<int64_t>& down = shapes[*g.down];
    const std::vector<int64_t>& up = shapes[*g.up];
    const std::string prefix = (g.is_double ? "transformer_blocks." : "single_transformer_blocks.") +
                               std::to_string(g.block) + ".";
    const bool fused = g.layer->modules.size() > 1;
    // A single block's proj_lora [r, dim] on proj_out [dim, dim + mlp] (attention and MLP in): diffusers zero-pads
    // the down factor to proj_out's width (_maybe_expand_lora_state_dict), so the LoRA changes the attention's columns.
    int64_t padded_to = 0;
    std::vector<int64_t> read_down = down;
    if (!g.is_double && !fused)
      if (auto c = modules.find("transformer"); c != modules.end())
        if (auto w = c->second.find(prefix + "proj_out"); w != c->second.end() && w->second.size() == 2 &&
                                                          down.size() == 2 && down[1] < w->second[1]) {
          padded_to = w->second[1];
          read_down[1] = padded_to;
        }
    LoraLayer proto{"transformer", "", *g.down, *g.up, std::nullopt, down.empty() ? 0 : down[0]};
    proto.split_block_diagonal = false;  // handle_qkv: the whole down factor for each third
    proto.down_padded_to = padded_to;
    std::vector<LoraLayer> parts =
        stacked_lora_layers(proto, prefix, g.layer->modules, modules, read_down, up, where, name);
    if (parts.empty()) {
      unmatched.push_back(*g.down);
      continue;
    }
    // handle_qkv adds a fused layer's lora_B factors at its down key; the others come at their up key.
    for (LoraLayer& l : parts) found.emplace_back(fused ? *g.down : *g.up, std::move(l));
  }
  const std::string label = facts.family_label;
  if (!unmatched.empty())
    throw InputError(where + ": an XLabs FLUX.1 LoRA, " + std::to_string(unmatched.size()) + " of whose layers match no "
                     "weight of this " + label + " model, e.g. " + quote(unmatched.front(), 80) + "; it was made for "
                     "another model (or another version of it): use a LoRA made for this one");
  if (found.empty())
    throw InputError(where + ": an XLabs FLUX.1 LoRA (\"processor\" in its keys, e.g. " +
                     quote(ignored_example, 80) + ") without a double_blocks or single_blocks layer, of which diffusers "
                     "0.36 reads nothing; is it a LoRA for " + label + "?");
  if (ignored && !ignored_example.empty())
    ignored->push_back("its keys outside double_blocks and single_blocks (e.g. " + quote(ignored_example, 80) +
                       "), which diffusers 0.36 does not read from an XLabs FLUX.1 LoRA either");
  // The file's keys are sorted (safetensors); the parts of a fused layer stay in handle_qkv's order.
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LoraLayer> layers;
  for (auto& f : found) layers.push_back(std::move(f.second));
  return layers;
}

}  // namespace dpinfer::pipeline

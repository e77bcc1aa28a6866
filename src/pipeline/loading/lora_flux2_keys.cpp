// Ref: diffusers 0.37 loaders/lora_conversion_utils.py _convert_non_diffusers_flux2_lora_to_diffusers,
// loaders/lora_pipeline.py Flux2LoraLoaderMixin.lora_state_dict and load_lora_weights, utils/peft_utils.py
// get_peft_kwargs.
#include "dpinfer/pipeline/loading/lora_flux2_keys.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/pipeline/loading/lora_flux_keys.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// A BFL layer and the diffusers modules it is (several: a fused q/k/v projection, the lora_B rows theirs in equal
/// thirds), in the converter's order within its kind of block.
struct Flux2Layer {
  const char* name;                  ///< after "double_blocks.<i>." / "single_blocks.<i>.", or the whole name
  std::vector<std::string> modules;  ///< after "transformer_blocks.<i>." / "single_transformer_blocks.<i>.", or whole
};
const std::vector<Flux2Layer>& flux2_double_block_layers() {
  static const std::vector<Flux2Layer> t = {
      {"img_attn.qkv", {"attn.to_q", "attn.to_k", "attn.to_v"}},
      {"txt_attn.qkv", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}},
      {"img_attn.proj", {"attn.to_out.0"}},
      {"txt_attn.proj", {"attn.to_add_out"}},
      {"img_mlp.0", {"ff.linear_in"}},
      {"img_mlp.2", {"ff.linear_out"}},
      {"txt_mlp.0", {"ff_context.linear_in"}},
      {"txt_mlp.2", {"ff_context.linear_out"}}};
  return t;
}
const std::vector<Flux2Layer>& flux2_single_block_layers() {
  static const std::vector<Flux2Layer> t = {{"linear1", {"attn.to_qkv_mlp_proj"}}, {"linear2", {"attn.to_out"}}};
  return t;
}
const std::vector<Flux2Layer>& flux2_other_layers() {
  static const std::vector<Flux2Layer> t = {
      {"img_in", {"x_embedder"}},
      {"txt_in", {"context_embedder"}},
      {"time_in.in_layer", {"time_guidance_embed.timestep_embedder.linear_1"}},
      {"time_in.out_layer", {"time_guidance_embed.timestep_embedder.linear_2"}},
      {"final_layer.linear", {"proj_out"}},
      {"final_layer.adaLN_modulation.1", {"norm_out.linear"}},
      {"single_stream_modulation.lin", {"single_stream_modulation.linear"}},
      {"double_stream_modulation_img.lin", {"double_stream_modulation_img.linear"}},
      {"double_stream_modulation_txt.lin", {"double_stream_modulation_txt.linear"}}};
  return t;
}

constexpr const char* kFlux2Expected =
    "expected diffusion_model. (or base_model.model.) then double_blocks.<i>.{img,txt}_attn.{qkv,proj}, "
    "double_blocks.<i>.{img,txt}_mlp.{0,2}, single_blocks.<i>.linear{1,2}, img_in, txt_in, time_in.*, final_layer.* "
    "or *_modulation*.lin, with .lora_A.weight / .lora_B.weight (or lora_down / lora_up)";

/// One layer's keys in the file, and where the converter lists it: single blocks first, then double blocks, then
/// the other layers, each in its table's order.
struct Flux2Group {
  std::tuple<int, int64_t, size_t> order;
  std::string prefix;  ///< of the diffusers modules: "transformer_blocks.3." or ""
  const Flux2Layer* layer = nullptr;
  std::optional<std::string> down, up;
};

}  // namespace

bool is_bfl_flux2_lora(const std::vector<LoraTensorKey>& keys) {
  return std::any_of(keys.begin(), keys.end(), [](const LoraTensorKey& k) {
    return starts_with(k.key, "diffusion_model.") || starts_with(k.key, "base_model.model.");
  });
}

std::vector<LoraLayer> map_bfl_flux2_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                               const LoraModelFacts& facts, const std::string& file) {
  const std::string where = quote(file);
  const std::string label = facts.family_label;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, Flux2Group> groups;  // by BFL layer name
  for (const LoraTensorKey& t : keys) {
    shapes[t.key] = t.shape;
    std::string k = t.key;
    if (starts_with(k, "diffusion_model.")) {
      k = k.substr(16);
    } else if (starts_with(k, "base_model.model.")) {
      k = k.substr(17);  // lora_state_dict's rename to diffusion_model., which the converter strips
    } else {
      throw InputError(where + ": key " + quote(t.key, 80) + " has no diffusion_model. prefix beside keys that do; "
                       "diffusers 0.37 converts every key of such a " + label + " LoRA from BFL's names and fails on "
                       "this one: drop it, or split the file in two");
    }
    std::string slot;
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight"})
      if (ends_with(k, suffix)) {
        slot = suffix;
        k = k.substr(0, k.size() - slot.size());
      }
    int kind = 2;  // the other layers
    std::optional<std::pair<int64_t, std::string>> block;
    if ((block = key_rules::indexed(k, "single_blocks."))) kind = 0;
    else if ((block = key_rules::indexed(k, "double_blocks."))) kind = 1;
    const std::vector<Flux2Layer>& table =
        kind == 0 ? flux2_single_block_layers() : kind == 1 ? flux2_double_block_layers() : flux2_other_layers();
    const std::string name = block ? block->second : k;
    auto entry = std::find_if(table.begin(), table.end(), [&](const Flux2Layer& l) { return name == l.name; });
    if (slot.empty() || entry == table.end())
      throw InputError(where + ": key " + quote(t.key, 80) + " is not a FLUX.2 LoRA factor in BFL's names (" + kFlux2Expected +
                       "); diffusers 0.37 fails on it too (\"original_state_dict should be empty\")" +
                       (ends_with(t.key, ".alpha") ? ", as on every alpha: drop the alphas" : ""));
    Flux2Group& g = groups[k];
    g.order = {kind, block ? block->first : 0, static_cast<size_t>(entry - table.begin())};
    g.prefix = kind == 0   ? "single_transformer_blocks." + std::to_string(block->first) + "."
               : kind == 1 ? "transformer_blocks." + std::to_string(block->first) + "."
                           : "";
    g.layer = &*entry;
    const bool down = slot == ".lora_A.weight" || slot == ".lora_down.weight";
    std::optional<std::string>& factor = down ? g.down : g.up;
    if (factor)
      throw InputError(where + ": " + quote(*factor, 80) + " and " + quote(t.key, 80) + " are the same " + label +
                       " LoRA factor; diffusers 0.37 would keep one of them: drop the other");
    factor = t.key;
  }

  std::vector<const Flux2Group*> ordered;
  for (const auto& [name, g] : groups) ordered.push_back(&g);
  std::sort(ordered.begin(), ordered.end(), [](const Flux2Group* a, const Flux2Group* b) { return a->order < b->order; });
  std::vector<LoraLayer> layers;
  std::vector<std::string> unmatched;
  for (const Flux2Group* g : ordered) {
    const std::string name = g->prefix + g->layer->name;
    if (!g->down || !g->up)
      throw InputError(where + ": " + label + " LoRA layer " + quote(*(g->down ? g->down : g->up), 80) + " has its " +
                       (g->down ? "lora_A" : "lora_B") + " factor but not its " + (g->down ? "lora_B" : "lora_A") +
                       ", without which diffusers 0.37 cannot load the file either; the file is incomplete");
    const std::vector<int64_t>& down = shapes[*g->down];
    LoraLayer proto{"transformer", "", *g->down, *g->up, std::nullopt, down.empty() ? 0 : down[0]};
    proto.split_block_diagonal = false;  // torch.chunk(lora_B, 3): equal thirds, the whole lora_A for each
    std::vector<LoraLayer> parts =
        stacked_lora_layers(proto, g->prefix, g->layer->modules, modules, down, shapes[*g->up], where, name);
    if (parts.empty()) unmatched.push_back(*g->down);
    for (LoraLayer& l : parts) layers.push_back(std::move(l));
  }
  if (!unmatched.empty())
    throw InputError(where + ": a " + label + " LoRA in BFL's names, " + std::to_string(unmatched.size()) +
                     " of whose layers match no weight of this model, e.g. " + quote(unmatched.front(), 80) +
                     "; it was made for another model (or another size of it): use a LoRA made for this one");
  return layers;
}

}  // namespace dpinfer::pipeline

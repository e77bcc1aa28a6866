// Ref: diffusers 0.36 loaders/lora_conversion_utils.py (_maybe_map_sgm_blocks_to_diffusers,
// _convert_non_diffusers_lora_to_diffusers, _convert_unet_lora_key, _convert_text_encoder_lora_key)
// and loaders/lora_pipeline.py (StableDiffusionLoraLoaderMixin.lora_state_dict).
#include "dpinfer/pipeline/loading/lora_keys.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "dpinfer/pipeline/loading/lora_flux_keys.h"
#include "dpinfer/pipeline/loading/lora_flux_mixture_keys.h"
#include "dpinfer/pipeline/loading/lora_flux2_keys.h"
#include "dpinfer/pipeline/loading/lora_flux_xlabs_keys.h"
#include "dpinfer/pipeline/loading/lora_sgm_order.h"
#include "dpinfer/pipeline/loading/lora_component_spellings.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr size_t kMaxListedLoraKeys = 3;

/// A kohya prefix and the component it names.
struct KohyaPrefix {
  const char* prefix;
  const char* component;
};
constexpr KohyaPrefix kKohyaPrefixes[] = {
    {"lora_unet_", "unet"}, {"lora_te1_", "text_encoder"}, {"lora_te2_", "text_encoder_2"}, {"lora_te_", "text_encoder"}};

/// The PEFT factor suffixes: down (A) first, then up (B).
constexpr const char* kPeftDown[] = {".lora_A.weight", ".lora.down.weight"};
constexpr const char* kPeftUp[] = {".lora_B.weight", ".lora.up.weight"};

/// Formats dpinfer does not read, by a piece of their keys.
struct Unsupported {
  const char* piece;
  const char* what;
};
constexpr Unsupported kUnsupported[] = {{"hada_", "LyCORIS LoHa"},
                                        {"lokr_", "LyCORIS LoKr"},
                                        {".lora_mid.", "LoCon with a CP-decomposed (lora_mid) conv"}};

/// A DoRA layer's magnitude in diffusers' / PEFT's names (get_peft_kwargs: use_dora).
constexpr const char* kMagnitude = ".lora_magnitude_vector";

std::string lora_shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<std::string> split_underscores(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == '_') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

bool parse_index(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoll(s);
  return true;
}

std::string join_from(const std::vector<std::string>& parts, size_t from) {
  std::string s;
  for (size_t i = from; i < parts.size(); ++i) s += (i > from ? "_" : "") + parts[i];
  return s;
}

/// ResBlock names of the original UNet, as diffusers' _convert_unet_lora_key renames them.
std::string rename_resblock(std::string rest) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {"in_layers_2", "conv1"}, {"out_layers_3", "conv2"}, {"emb_layers_1", "time_emb_proj"},
      {"skip_connection", "conv_shortcut"}};
  for (const auto& [from, to] : kRenames)
    if (rest == from) return to;
  return rest;
}

/// An underscored UNet module name in the original (SGM/LDM) block numbering as diffusers'
/// underscored name; names already in diffusers' numbering come back unchanged. Block
/// numbers follow _maybe_map_sgm_blocks_to_diffusers: input block i >= 1 is down block
/// (i - 1) / (layers_per_block + 1), layer (i - 1) % (layers_per_block + 1), its part j 0 the
/// resnet and 1 the attention, "op" the downsampler; output block i is up block
/// i / (layers_per_block + 1), layer i % (layers_per_block + 1), part 2 the upsampler. Where
/// that function has no answer, the original layout's own: input_blocks_0_0 is conv_in, an
/// output block's part 1 "conv" is the upsampler of a block without attention, time_embed_0/2
/// and label_emb_0_0/2 the time and added embeddings, out_2 conv_out.
std::string sgm_to_diffusers(const std::string& name, int64_t lpb) {
  static const std::pair<const char*, const char*> kTopLevel[] = {
      {"input_blocks_0_0", "conv_in"},         {"time_embed_0", "time_embedding_linear_1"},
      {"time_embed_2", "time_embedding_linear_2"}, {"label_emb_0_0", "add_embedding_linear_1"},
      {"label_emb_0_2", "add_embedding_linear_2"}, {"out_2", "conv_out"}};
  for (const auto& [from, to] : kTopLevel)
    if (name == from) return to;
  const std::vector<std::string> p = split_underscores(name);
  int64_t i = 0, j = 0;
  if (p.size() >= 5 && p[0] == "input" && p[1] == "blocks" && parse_index(p[2], &i) && parse_index(p[3], &j) && i >= 1) {
    const int64_t block = (i - 1) / (lpb + 1), layer = (i - 1) % (lpb + 1);
    const std::string rest = join_from(p, 4);
    if (rest == "op") return "down_blocks_" + std::to_string(block) + "_downsamplers_0_conv";
    if (j == 0) return "down_blocks_" + std::to_string(block) + "_resnets_" + std::to_string(layer) + "_" + rename_resblock(rest);
    if (j == 1) return "down_blocks_" + std::to_string(block) + "_attentions_" + std::to_string(layer) + "_" + rest;
    return name;
  }
  if (p.size() >= 4 && p[0] == "middle" && p[1] == "block" && parse_index(p[2], &i)) {
    const std::string rest = join_from(p, 3);
    if (i == 0) return "mid_block_resnets_0_" + rename_resblock(rest);
    if (i == 1) return "mid_block_attentions_0_" + rest;
    if (i == 2) return "mid_block_resnets_1_" + rename_resblock(rest);
    return name;
  }
  if (p.size() >= 5 && p[0] == "output" && p[1] == "blocks" && parse_index(p[2], &i) && parse_index(p[3], &j)) {
    const int64_t block = i / (lpb + 1), layer = i % (lpb + 1);
    const std::string rest = join_from(p, 4);
    const std::string up = "up_blocks_" + std::to_string(block) + "_";
    if (j == 0) return up + "resnets_" + std::to_string(layer) + "_" + rename_resblock(rest);
    if ((j == 1 || j == 2) && rest == "conv") return up + "upsamplers_0_conv";
    if (j == 1) return up + "attentions_" + std::to_string(layer) + "_" + rest;
    return name;
  }
  return name;
}

/// A LoRA layer's keys as found, before they are matched to a module.
struct LayerGroup {
  std::string component;  ///< empty for a kohya name with an unknown prefix
  std::string name;       ///< kohya: underscored; PEFT: dotted
  std::string prefix;     ///< how its keys start, for messages: "lora_unet_", "transformer."
  bool kohya = false;     ///< an underscored module name
  bool down_up = false;   ///< lora_down/lora_up factors (kohya's names), not lora_A/lora_B
  bool non_diffusers = false;  ///< a Qwen-Image / Z-Image transformer layer outside diffusers' names
  std::optional<std::string> down, up, alpha, magnitude;
  std::string first_key;
};

/// `name` with its last part (after the last '.' or, underscored, '_') renamed by `renames`, or
/// "" when no rename applies.
std::string rename_last_part(const std::string& name, bool underscored,
                             const std::vector<std::pair<std::string, std::string>>& renames) {
  const char sep = underscored ? '_' : '.';
  for (const auto& [from, to] : renames) {
    if (name != from && !ends_with(name, std::string(1, sep) + from)) continue;
    std::string target = to;
    if (underscored) std::replace(target.begin(), target.end(), '.', '_');
    return name.substr(0, name.size() - from.size()) + target;
  }
  return "";
}

/// Sorts one key's base name (its suffix cut) into a LayerGroup's component and name.
void classify(LayerGroup& g, const std::string& base, const LoraKeyRules& rules, const LoraModuleTable& modules) {
  static const std::string kDiffusionModel = "diffusion_model.";
  if (rules.non_diffusers_transformer && starts_with(base, kDiffusionModel)) {
    // _convert_non_diffusers_*_lora_to_diffusers: removeprefix("diffusion_model.")
    g.component = "transformer";
    g.name = base.substr(kDiffusionModel.size());
    g.prefix = kDiffusionModel;
    g.non_diffusers = true;
    return;
  }
  if (base.find('.') == std::string::npos && starts_with(base, "lora_")) {
    g.kohya = true;
    g.name = base;
    g.prefix = base.substr(0, base.find('_', 5) + 1);
    for (const KohyaPrefix& k : kKohyaPrefixes)
      if (starts_with(base, k.prefix)) {
        g.name = base.substr(std::char_traits<char>::length(k.prefix));
        if (rules.kohya_unet) {
          g.component = k.component;
        } else if (rules.non_diffusers_transformer && std::string(k.prefix) == "lora_unet_") {
          g.component = "transformer";  // removeprefix("lora_unet_"), then '_' back to '.'
          g.non_diffusers = true;
        }
        break;
      }
    return;
  }
  const size_t dot = base.find('.');
  g.component = dot == std::string::npos ? std::string() : base.substr(0, dot);
  g.name = dot == std::string::npos ? base : base.substr(dot + 1);
  g.prefix = g.component + ".";
  if (rules.non_diffusers_transformer && !modules.count(g.component)) {
    // No prefix: the transformer's module itself (the converters' keys before "transformer." is added).
    g.component = "transformer";
    g.name = base;
    g.prefix = dot == std::string::npos ? base : base.substr(0, dot + 1);
    g.non_diffusers = true;
  }
}

/// Whether diffusers 0.36 files the alpha of kohya layer `module` of `component` under a name that
/// reaches no module (LoraLayer::alpha_reaches_no_module): the UNet's attention projections and CLIP's
/// self-attention ones, whose converted names become "to_q_lora" etc. instead of "<module>.lora.".
bool alpha_reaches_no_module(const std::string& component, const std::string& module) {
  static const std::vector<std::string> kUnetAttention = {".to_q", ".to_k", ".to_v", ".to_out.0"};
  static const std::vector<std::string> kClipAttention = {".q_proj", ".k_proj", ".v_proj", ".out_proj"};
  const auto& projections = component == "unet" ? kUnetAttention : kClipAttention;
  return std::any_of(projections.begin(), projections.end(), [&](const std::string& p) { return ends_with(module, p); });
}

const char* strip_suffix(const std::string& key, std::initializer_list<const char*> suffixes, std::string* base) {
  for (const char* s : suffixes)
    if (ends_with(key, s)) {
      *base = key.substr(0, key.size() - std::char_traits<char>::length(s));
      return s;
    }
  return nullptr;
}

/// Throws unless `shape` is the DoRA magnitude PEFT keeps for a weight of shape `w`: [out] for a Linear,
/// [1, out, 1, 1] for a Conv2d (peft 0.17 DoraLinearLayer / _DoraConvNdLayer.get_weight_norm).
void check_magnitude_shape(const std::string& where, const std::string& key, const std::vector<int64_t>& shape,
                           const std::string& target, const std::vector<int64_t>& w) {
  const std::vector<int64_t> want =
      w.size() == 4 ? std::vector<int64_t>{1, w[0], 1, 1} : std::vector<int64_t>{w.empty() ? 0 : w[0]};
  if (shape != want)
    throw InputError(where + ": DoRA magnitude " + quote(key, 80) + " has shape " + lora_shape_text(shape) + ", but " +
                     target + " " + lora_shape_text(w) + " takes " + lora_shape_text(want) +
                     " (diffusers cannot load it either); is it a LoRA for another model?");
}

}  // namespace

std::string peft_spelling(const std::string& key) {
  std::string base;
  const char* factor = nullptr;
  for (const char* f : {".down.weight", ".up.weight"})
    if (ends_with(key, f)) {
      factor = f;
      base = key.substr(0, key.size() - std::char_traits<char>::length(f));
    }
  if (!factor) return key;
  const std::string peft = std::string(factor) == ".down.weight" ? ".lora_A.weight" : ".lora_B.weight";
  static const std::string kLinearLayer = ".lora_linear_layer";
  if (ends_with(base, kLinearLayer))
    return starts_with(key, "text_encoder") ? base.substr(0, base.size() - kLinearLayer.size()) + peft : key;
  static const std::pair<const char*, const char*> kProcessor[] = {
      {"to_q_lora", "to_q"}, {"to_k_lora", "to_k"}, {"to_v_lora", "to_v"}, {"to_out_lora", "to_out.0"}};
  static const std::pair<const char*, const char*> kClip[] = {
      {"to_q_lora", "q_proj"}, {"to_k_lora", "k_proj"}, {"to_v_lora", "v_proj"}, {"to_out_lora", "out_proj"}};
  const size_t dot = base.rfind('.');
  if (dot == std::string::npos) return key;
  const std::string parent = base.substr(0, dot), last = base.substr(dot + 1);
  static const std::string kProcessorPart = ".processor";
  if (ends_with(parent, kProcessorPart)) {
    for (const auto& [from, to] : kProcessor)
      if (last == from) return parent.substr(0, parent.size() - kProcessorPart.size()) + "." + to + peft;
    return key;
  }
  if (ends_with(parent, ".self_attn"))
    for (const auto& [from, to] : kClip)
      if (last == from) return parent + "." + to + peft;
  return key;
}

std::vector<LoraTensorKey> without_dora_scales(const std::vector<LoraTensorKey>& keys,
                                               std::vector<std::string>* ignored) {
  std::vector<LoraTensorKey> kept;
  std::string dropped;
  for (const LoraTensorKey& t : keys) {
    if (t.key.find("dora_scale") == std::string::npos) kept.push_back(t);
    else if (dropped.empty()) dropped = t.key;
  }
  if (ignored && !dropped.empty())
    ignored->push_back("its DoRA magnitudes (dora_scale, e.g. " + quote(dropped, 80) + "), which diffusers 0.36 drops "
                       "from every file: its layers merge as plain LoRA layers");
  return kept;
}

std::string unread_lora_kind(const std::string& key) {
  for (const Unsupported& u : kUnsupported)
    if (key.find(u.piece) != std::string::npos) return u.what;
  return "";
}

namespace {

// What a loader that reads only diffusers' names asks for instead.
constexpr const char* kPeftOnly = "use a LoRA in diffusers' (PEFT) names: transformer.<module>.lora_A.weight and "
                                  ".lora_B.weight (diffusers' load_lora_weights, then save_lora_weights, converts one)";

// What a FLUX.1-style loader refuses (FluxLoraLoaderMixin: FLUX.1 and Chroma): diffusers 0.36's lora_state_dict
// converts kohya files (any lora_down key: lora_flux_keys.h reads those in BFL's block names,
// lora_flux_mixture_keys.h those in its underscored names), XLabs ("processor": lora_flux_xlabs_keys.h)
// and BFL control LoRAs. A file in BFL's block names with lora_A/lora_B factors is none of those:
// diffusers loads nothing from it ("diffusion_model.") or fails ("transformer."); nor is one in the
// underscored names without lora_down factors.
LoraKeyRules flux_loader_rules(std::vector<std::string> components) {
  const std::string bfl_peft = "LoRA in BFL's FLUX.1 block names with lora_A/lora_B factors (double_blocks/"
                               "single_blocks), from which diffusers 0.36 loads nothing";
  LoraKeyRules rules;
  rules.components = std::move(components);
  rules.kohya_unet = false;
  rules.kohya_flux = true;
  rules.every_key_names_lora = false;  // lora_state_dict pops the .alpha keys as network alphas
  rules.refused = {{"double_blocks", bfl_peft},
                   {"single_blocks", bfl_peft},
                   {"lora_transformer_", "LoRA in diffusers' underscored FLUX.1 names (lora_transformer_) without "
                                         ".lora_down.weight factors, from which diffusers 0.36 loads nothing"}};
  rules.reads = std::string(kPeftOnly) +
                ", or a kohya one (lora_unet_double_blocks_... or lora_transformer_..., .lora_down.weight / "
                ".lora_up.weight), or an XLabs one (double_blocks.<i>.processor....)";
  return rules;
}

// QwenImageLoraLoaderMixin and ZImageLoraLoaderMixin: the transformer only, in diffusers' names or the original
// ones (_convert_non_diffusers_{qwen,z_image}_lora_to_diffusers).
LoraKeyRules non_diffusers_transformer_rules() {
  LoraKeyRules rules;
  rules.every_key_names_lora = false;
  rules.components = {"transformer"};
  rules.kohya_unet = false;
  rules.non_diffusers_transformer = true;
  return rules;
}

}  // namespace

LoraKeyRules stable_diffusion_lora_rules() { return LoraKeyRules{}; }  // the defaults are StableDiffusionLoraLoaderMixin's

LoraKeyRules stable_diffusion_xl_lora_rules() {
  LoraKeyRules rules;
  rules.components = {"unet", "text_encoder", "text_encoder_2"};
  rules.sgm_block_names = true;  // StableDiffusionXLLoraLoaderMixin's _maybe_map_sgm_blocks_to_diffusers
  return rules;
}

// FluxLoraLoaderMixin: transformer and text_encoder (CLIP).
LoraKeyRules flux_lora_rules() { return flux_loader_rules({"transformer", "text_encoder"}); }

// ChromaPipeline uses FluxLoraLoaderMixin, and has no CLIP.
LoraKeyRules chroma_lora_rules() { return flux_loader_rules({"transformer"}); }

LoraKeyRules stable_diffusion_3_lora_rules() {
  // SD3LoraLoaderMixin converts nothing: only diffusers' names load there.
  LoraKeyRules rules;
  rules.components = {"transformer", "text_encoder", "text_encoder_2"};
  rules.kohya_unet = false;
  rules.refused = {{"joint_blocks", "LoRA in the original SD3 MMDiT names (joint_blocks)"}};
  rules.reads = kPeftOnly;
  return rules;
}

LoraKeyRules qwen_image_lora_rules() { return non_diffusers_transformer_rules(); }

LoraKeyRules z_image_lora_rules() {
  LoraKeyRules rules = non_diffusers_transformer_rules();
  rules.last_part_renames = {{"out", "to_out.0"}};  // Z-Image's normalize_out_key: an attention's "out" is "to_out.0"
  rules.unet_prefix_fails = true;
  return rules;
}

// Flux2LoraLoaderMixin (diffusers 0.37): the transformer only, in diffusers' names or BFL's (lora_flux2_keys.h); its
// load_lora_weights refuses a key without "lora" (an alpha beside diffusers' names).
LoraKeyRules flux2_lora_rules() {
  LoraKeyRules rules;
  rules.components = {"transformer"};
  rules.kohya_unet = false;
  rules.bfl_flux2 = true;
  return rules;
}

void check_lora_factors_fit(const std::string& where, const std::string& layer, const std::vector<int64_t>& down,
                            const std::vector<int64_t>& up, const std::string& target,
                            const std::vector<int64_t>& w) {
  bool fits = false;
  if (w.size() == 2) fits = down.size() == 2 && up.size() == 2 && down[1] == w[1] && up[0] == w[0] && up[1] == down[0];
  if (w.size() == 4)
    fits = down.size() == 4 && up.size() == 4 && down[1] == w[1] && down[2] == w[2] && down[3] == w[3] &&
           up[0] == w[0] && up[1] == down[0] && up[2] == 1 && up[3] == 1;
  if (!fits || down.empty() || down[0] < 1)
    throw InputError(where + ": layer " + quote(layer, 80) + " has down " + lora_shape_text(down) + " and up " +
                     lora_shape_text(up) + ", which do not fit " + target + " " + lora_shape_text(w) + " (expected down [r, " +
                     std::to_string(w.size() > 1 ? w[1] : 0) +
                     (w.size() == 4 ? ", " + std::to_string(w[2]) + ", " + std::to_string(w[3]) : std::string()) +
                     "] and up [" + std::to_string(w.empty() ? 0 : w[0]) + ", r" + (w.size() == 4 ? ", 1, 1" : "") +
                     "]); is it a LoRA for another model?");
}

void check_lora_alpha_shape(const std::string& where, const std::string& key, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != 1) throw InputError(where + ": " + quote(key, 80) + " has shape " + lora_shape_text(shape) + "; an alpha is one number");
}

namespace {

std::vector<LoraLayer> map_lora_keys_as_spelled(const std::vector<LoraTensorKey>& file_tensors,
                                                const LoraModuleTable& modules, const LoraModelFacts& facts,
                                                const std::string& file, std::vector<std::string>* ignored) {
  const std::string where = quote(file);
  const std::vector<LoraTensorKey> keys = without_dora_scales(file_tensors, ignored);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, LayerGroup> groups;  // by base name: kohya "lora_unet_x" or PEFT "unet.x"
  std::vector<std::string> not_lora;
  const LoraKeyRules& rules = facts.rules;
  for (const LoraTensorKey& t : keys)
    if (const std::string kind = unread_lora_kind(t.key); !kind.empty())
      throw InputError(where + ": a " + kind + " file (key " + quote(t.key, 80) +
                       "); dpinfer reads LoRA (kohya, PEFT) and LoCon files only; convert it or drop it");
  // FLUX.2's BFL names: its converter runs before load_lora_weights checks the keys, and fails on alphas itself.
  if (rules.bfl_flux2 && is_bfl_flux2_lora(keys)) return map_bfl_flux2_lora_keys(keys, modules, facts, file);
  if (rules.every_key_names_lora)
    for (const LoraTensorKey& t : keys)
      if (ends_with(t.key, ".alpha") && t.key.find("lora") == std::string::npos)
        throw InputError(where + ": alpha " + quote(t.key, 80) + " beside diffusers' names, on which diffusers "
                         "fails for a " + facts.family_label + " LoRA (\"Invalid LoRA checkpoint.\": its "
                         "load_lora_weights wants \"lora\" in every key); dpinfer refuses it as diffusers does: drop "
                         "the .alpha tensors (PEFT then scales by the first layer's rank / each layer's) or write "
                         "lora_alpha into the file's lora_adapter_metadata");
  if (rules.non_diffusers_transformer) {
    // QwenImageLoraLoaderMixin / ZImageLoraLoaderMixin.lora_state_dict run their converter only when some key ends
    // with ".alpha", starts with "lora_unet_" or "diffusion_model.", or has "default."; otherwise a key without
    // the "transformer." prefix loads nowhere (load_lora_into_transformer keeps that prefix's keys only).
    const bool converts = std::any_of(keys.begin(), keys.end(), [](const LoraTensorKey& t) {
      return ends_with(t.key, ".alpha") || starts_with(t.key, "lora_unet_") || starts_with(t.key, "diffusion_model.") ||
             t.key.find("default.") != std::string::npos;
    });
    if (!converts)
      for (const LoraTensorKey& t : keys)
        if (!std::any_of(rules.components.begin(), rules.components.end(),
                         [&](const std::string& c) { return starts_with(t.key, c + "."); }))
          throw InputError(where + ": key " + quote(t.key, 80) + " names no component, and diffusers 0.36 converts a " +
                           facts.family_label + " LoRA from the transformer's own names only when some key starts "
                           "with diffusion_model. or lora_unet_, ends with .alpha or has default.; so it loads "
                           "nothing from this layer: name it transformer.<module> (or diffusion_model.<module>)");
    // The converter puts "transformer." before every key it returns, so a key that had it already names
    // transformer.transformer.<module>: PEFT finds no such module (diffusers fails, or drops the layer beside others).
    if (converts)
      for (const LoraTensorKey& t : keys)
        if (starts_with(t.key, "transformer."))
          throw InputError(where + ": key " + quote(t.key, 80) + " starts with transformer. in a file that starts "
                           "diffusers 0.36's " + facts.family_label + " converter (a key ends with .alpha, starts with "
                           "diffusion_model. or lora_unet_, or has default.), which puts transformer. before every key "
                           "again, so diffusers fails (\"Target modules ... not found in the base model\") or drops the "
                           "layer; dpinfer refuses it as diffusers does: drop the .alpha tensors or the transformer. "
                           "prefix");
    if (rules.unet_prefix_fails)
      for (const LoraTensorKey& t : keys)
        if (starts_with(t.key, "lora_unet_"))
          throw InputError(where + ": key " + quote(t.key, 80) + " is in the lora_unet_ form, on which diffusers 0.36 "
                           "fails for every " + facts.family_label + " file (_convert_non_diffusers_z_image_lora_to_"
                           "diffusers: \"`state_dict` should be empty at this point\"); dpinfer refuses it as "
                           "diffusers does: name its layers diffusion_model.<module> (dots, as the model names them)");
  }
  if (!rules.kohya_flux)
    for (const LoraTensorKey& t : keys)
      for (const char* bfl : {"lora_unet_double_blocks_", "lora_unet_single_blocks_", "diffusion_model.double_blocks.",
                              "diffusion_model.single_blocks."})
        if (starts_with(t.key, bfl))
          throw InputError(where + ": a FLUX.1 LoRA (BFL's block names; key " + quote(t.key, 80) + "), not for this " +
                           facts.family_label + " model: use a LoRA made for " + facts.family_label);
  if (rules.kohya_flux && is_kohya_flux_lora(keys)) {
    // A kohya LoRA for a UNet model (lora_unet_down_blocks_..., lora_unet_input_blocks_...) is one too.
    for (const LoraTensorKey& t : keys)
      if (starts_with(t.key, "lora_unet_") && !starts_with(t.key, "lora_unet_double_blocks_") &&
          !starts_with(t.key, "lora_unet_single_blocks_") &&
          (t.key.find("_blocks_") != std::string::npos || starts_with(t.key, "lora_unet_mid_block_") ||
           starts_with(t.key, "lora_unet_middle_block_")))
        throw InputError(where + ": a LoRA for a UNet model (Stable Diffusion 1.x/2.x or SDXL; key " + quote(t.key, 80) +
                         "), not for this " + facts.family_label + " model (diffusers 0.36 fails on it: \"Incompatible "
                         "keys detected\"): use a LoRA made for " + facts.family_label);
    return map_kohya_flux_lora_keys(keys, modules, facts, file, ignored);
  }
  // The other branches of diffusers' FluxLoraLoaderMixin.lora_state_dict, in its order: a kohya file (some
  // lora_down key) without "transformer." keys in the underscored names, then (no lora_down key) XLabs.
  if (rules.kohya_flux && is_mixture_flux_lora(keys))
    return map_mixture_flux_lora_keys(keys, modules, facts, file, ignored);
  if (rules.kohya_flux && is_xlabs_flux_lora(keys)) return map_xlabs_flux_lora_keys(keys, modules, facts, file, ignored);
  // The two branches after XLabs' (FluxLoraLoaderMixin.lora_state_dict): BFL's Control LoRAs ("query_norm.scale"
  // in a key) and fal's Kontext LoRAs ("base_model" in a key). Neither is read here, for the reasons given.
  if (rules.kohya_flux)
    for (const LoraTensorKey& t : keys) {
      if (t.key.find("query_norm.scale") != std::string::npos)
        throw InputError(where + ": a BFL FLUX.1 Control LoRA (key " + quote(t.key, 80) + "; diffusers 0.36 reads it "
                         "with _convert_bfl_flux_control_lora_to_diffusers), made for FLUX.1 Canny / Depth: it widens "
                         "x_embedder to take the control image's latents, which only FluxControlPipeline gives; dpinfer "
                         "runs no control pipeline, so it does not read it");
      if (t.key.find("base_model") != std::string::npos)
        throw InputError(where + ": a fal FLUX.1 Kontext LoRA (key " + quote(t.key, 80) + "; diffusers 0.36 reads it "
                         "with _convert_fal_kontext_lora_to_diffusers, which needs every layer of FLUX.1's 19 double "
                         "and 38 single blocks), which dpinfer does not read yet: no small model can check it against "
                         "diffusers; convert it with diffusers (load_lora_weights, then save_lora_weights)");
    }
  // _convert_kohya_flux_lora_to_diffusers's has_peft_state_dict branch: a FLUX.1 file with lora_down keys
  // and "transformer." keys keeps the transformer's only, lora_down/lora_up as lora_A/lora_B, and the
  // adapter gets no alphas (the .alpha tensors stay unread): PEFT's lora_alpha is the first layer's rank.
  bool kohya_down = false, transformer_keys = false;
  for (const LoraTensorKey& t : keys) {
    kohya_down = kohya_down || t.key.find(".lora_down.weight") != std::string::npos;
    transformer_keys = transformer_keys || starts_with(t.key, "transformer.");
  }
  const bool peft_in_kohya = rules.kohya_flux && kohya_down && transformer_keys;
  std::string dropped_example;
  // A kohya UNet-family file (every key lora_unet_/lora_te*_, the test of StableDiffusionXLLoraLoaderMixin's
  // and StableDiffusionLoraLoaderMixin's lora_state_dict): sorted, its keys are the file's order; those in the
  // original block names beside some in diffusers' are dropped, as diffusers drops them (lora_sgm_order.h).
  const bool all_kohya = std::all_of(keys.begin(), keys.end(), [](const LoraTensorKey& t) {
    return std::any_of(std::begin(kKohyaPrefixes), std::end(kKohyaPrefixes),
                       [&](const KohyaPrefix& k) { return starts_with(t.key, k.prefix); });
  });
  std::vector<std::string> file_keys;
  if (rules.kohya_unet && all_kohya) {
    for (const LoraTensorKey& t : keys) file_keys.push_back(t.key);
    std::sort(file_keys.begin(), file_keys.end());
  }
  // Only StableDiffusionXLLoraLoaderMixin calls _maybe_map_sgm_blocks_to_diffusers: StableDiffusionLoraLoaderMixin keeps
  // the original block names, so a file of them fails to load (PEFT finds none of its target modules), and beside
  // diffusers' names they are dropped only after their alphas counted for the inferred config.
  if (rules.kohya_unet && !rules.sgm_block_names)
    for (const LoraTensorKey& t : keys)
      for (const char* sgm : {"lora_unet_input_blocks_", "lora_unet_middle_block_", "lora_unet_output_blocks_"})
        if (starts_with(t.key, sgm))
          throw InputError(where + ": kohya UNet key " + quote(t.key, 80) + " is in the original (SGM) block names, "
                           "which diffusers 0.36 maps for SDXL only: for " + facts.family_label + " it fails to load "
                           "a file of them (and beside diffusers' block names drops them after counting their alphas, "
                           "which dpinfer does not emulate); dpinfer refuses it as diffusers does: use a LoRA in "
                           "diffusers' block names (lora_unet_down_blocks_..., what sd-scripts writes for SD 1.x/2.x)");
  const std::vector<std::string> sgm_dropped = sgm_keys_dropped(file_keys);  // sorted
  for (const LoraTensorKey& t : keys) {
    shapes[t.key] = t.shape;
    if (peft_in_kohya && !starts_with(t.key, "transformer.")) {
      if (dropped_example.empty()) dropped_example = t.key;
      continue;
    }
    if (std::binary_search(sgm_dropped.begin(), sgm_dropped.end(), t.key)) continue;
    for (const auto& [piece, what] : rules.refused)
      if (t.key.find(piece) != std::string::npos)
        throw InputError(where + ": a " + what + " (key " + quote(t.key, 80) + "), which dpinfer does not read yet; " +
                         rules.reads);
    // The converters' has_default: "default." (PEFT's adapter name) is dropped from every key.
    std::string key = t.key;
    if (rules.non_diffusers_transformer)
      for (size_t at = key.find("default."); at != std::string::npos; at = key.find("default.", at))
        key.erase(at, 8);
    std::string base;
    const char* suffix = strip_suffix(key, {".lora_down.weight", ".lora_up.weight", ".alpha", ".lora_A.weight",
                                            ".lora_B.weight", ".lora.down.weight", ".lora.up.weight", kMagnitude},
                                      &base);
    if (!suffix || base.empty()) {
      not_lora.push_back(t.key);
      continue;
    }
    LayerGroup& g = groups[base];
    if (g.first_key.empty()) {
      g.first_key = t.key;
      classify(g, base, rules, modules);
    }
    const std::string s = suffix;
    if (s == ".lora_down.weight" || s == ".lora_up.weight") g.down_up = true;
    std::optional<std::string>& slot = s == ".alpha"  ? g.alpha
                                       : s == kMagnitude ? g.magnitude
                                       : (s == ".lora_down.weight" || s == kPeftDown[0] || s == kPeftDown[1]) ? g.down
                                                                                                              : g.up;
    slot = t.key;
  }
  if (!not_lora.empty() && groups.empty())
    throw InputError(where + ": no LoRA keys (" + std::to_string(not_lora.size()) + " tensors such as " +
                     quote(not_lora.front(), 80) +
                     "; expected kohya .lora_down/.lora_up or PEFT .lora_A/.lora_B weights); is it a LoRA?");
  if (!not_lora.empty())
    throw InputError(where + ": " + std::to_string(not_lora.size()) + " key(s) that are not LoRA weights, e.g. " +
                     quote(not_lora.front(), 80) + "; dpinfer reads kohya, PEFT and LoCon LoRA files");
  if (groups.empty())  // a file of no tensors at all (found by fuzz_lora_keys: a header of "{}")
    throw InputError(where + ": no tensors (expected kohya .lora_down/.lora_up or PEFT .lora_A/.lora_B weights); "
                     "is it a LoRA?");

  // Underscored module names for the kohya keys, per component.
  std::map<std::string, std::map<std::string, std::string>> underscored;
  for (const auto& [component, table] : modules)
    for (const auto& [module, shape] : table) {
      std::string u = module;
      std::replace(u.begin(), u.end(), '.', '_');
      underscored[component][u] = module;
    }

  // A UNet family's LoRA (unet., or kohya names this family does not read) on a transformer model:
  // said first, before its text-encoder layers meet this model's text encoders by name.
  if (!modules.count("unet"))
    for (const auto& [base, g] : groups)
      if (g.prefix == "unet." || (g.kohya && g.component.empty() && starts_with(g.prefix, "lora_unet_")) ||
          (g.kohya && starts_with(g.prefix, "lora_te")))
        throw InputError(where + ": a LoRA for a UNet model (Stable Diffusion 1.x/2.x or SDXL; key " +
                         quote(g.first_key, 80) + "), not for this " + facts.family_label +
                         " model: use a LoRA made for " + facts.family_label);

  std::vector<LoraLayer> layers;
  std::vector<std::string> unmatched;
  std::set<std::string> prefixes;
  for (const auto& [base, g] : groups) {
    if (!g.down && !g.up) {  // a magnitude or an alpha alone made the group
      if (g.magnitude)
        throw InputError(where + ": layer " + quote(base, 80) + " has a DoRA magnitude (" + quote(*g.magnitude, 80) +
                         ") but no lora_A / lora_B weights; the file is incomplete");
      throw InputError(where + ": layer " + quote(base, 80) + " has an alpha (" + quote(g.alpha.value_or(base), 80) +
                       ") but no down / up weights (lora_down / lora_up or lora_A / lora_B); the file is incomplete");
    }
    if (g.magnitude && (g.kohya || g.down_up || g.non_diffusers))
      throw InputError(where + ": DoRA magnitude " + quote(*g.magnitude, 80) + " on a layer outside diffusers' (PEFT) "
                       "names, which diffusers 0.36 does not convert; use <component>.<module>.lora_A.weight / "
                       ".lora_B.weight / .lora_magnitude_vector names");
    if (!g.down || !g.up) {
      throw InputError(where + ": layer " + quote(base, 80) + " has its " + (g.down ? "down (A)" : "up (B)") +
                       " weight but not its " + (g.down ? "up (B)" : "down (A)") + " weight; the file is incomplete");
    }
    prefixes.insert(g.prefix);
    std::string module;
    if (auto comp = modules.find(g.component); comp != modules.end()) {
      // Z-Image's normalize_out_key renames the last part of lora_down/lora_up layers only.
      const bool renames = g.non_diffusers && g.down_up;
      if (g.kohya) {
        const auto& names = underscored[g.component];
        std::string name = g.name;
        if (g.component == "unet") name = sgm_to_diffusers(name, facts.layers_per_block);
        auto it = names.find(name);
        if (it == names.end() && renames) it = names.find(rename_last_part(name, true, rules.last_part_renames));
        if (it != names.end()) module = it->second;
      } else if (comp->second.count(g.name)) {
        module = g.name;
      } else if (renames) {
        const std::string renamed = rename_last_part(g.name, false, rules.last_part_renames);
        if (comp->second.count(renamed)) module = renamed;
      }
    }
    if (module.empty()) {
      unmatched.push_back(g.first_key);
      continue;
    }
    const std::vector<int64_t>& w = modules.at(g.component).at(module);
    const std::vector<int64_t>& down = shapes[*g.down];
    const std::vector<int64_t>& up = shapes[*g.up];
    check_lora_factors_fit(where, base, down, up, g.component + "." + module + ".weight", w);
    if (g.alpha) check_lora_alpha_shape(where, *g.alpha, shapes[*g.alpha]);
    if (g.magnitude)
      check_magnitude_shape(where, *g.magnitude, shapes[*g.magnitude], g.component + "." + module + ".weight", w);
    // The converters: a lora_down/lora_up layer's alpha goes into its factors; a lora_A/lora_B
    // layer's alpha is popped and dropped (its scaling is the LoRA's scale alone).
    LoraLayer layer;
    layer.component = g.component;
    layer.module = module;
    layer.down_key = *g.down;
    layer.up_key = *g.up;
    layer.alpha_key = g.alpha;
    layer.rank = down[0];
    layer.magnitude_key = g.magnitude;
    if (g.non_diffusers && g.down_up) layer.alpha_in_factors = true;
    if (rules.non_diffusers_transformer && g.component == "transformer" && !g.down_up) layer.alpha_key.reset();
    if (peft_in_kohya) layer.alpha_key.reset();  // the adapter gets no alphas
    if (rules.kohya_unet && g.kohya && layer.alpha_key)
      layer.alpha_reaches_no_module = alpha_reaches_no_module(g.component, module);
    layers.push_back(std::move(layer));
  }
  if (ignored && !sgm_dropped.empty())
    ignored->push_back("its layers in the original UNet block names (e.g. " + quote(sgm_dropped.front(), 80) +
                       "), which diffusers "
                       "0.36 drops from a file that also has layers in its own block names (down_blocks_, mid_block_, "
                       "up_blocks_)");
  if (ignored && !dropped_example.empty())
    ignored->push_back("its keys outside \"transformer.\" (e.g. " + quote(dropped_example, 80) + "), which diffusers 0.36 "
                       "does not read from a FLUX.1 LoRA with lora_down keys and \"transformer.\" ones either");
  std::string found;
  for (const std::string& p : prefixes) found += (found.empty() ? "" : ", ") + p;
  if (layers.empty()) {
    const bool dit = prefixes.count("transformer.") || prefixes.count("lora_transformer_") ||
                     prefixes.count("diffusion_model.");
    throw InputError(where + ": none of its " + std::to_string(groups.size()) + " LoRA layer(s) match a weight of this " +
                     facts.family_label + " model (its keys start with " + found + ", e.g. " +
                     quote(unmatched.front(), 80) + ")" +
                     (dit && modules.count("unet") ? "; it is a LoRA for a transformer (DiT) model, not for a UNet one"
                                                   : "; it is a LoRA for another model or family") +
                     ": use a LoRA made for " + facts.family_label);
  }
  if (!unmatched.empty()) {
    std::string examples;
    for (size_t k = 0; k < unmatched.size() && k < kMaxListedLoraKeys; ++k)
      examples += (k ? ", " : "") + quote(unmatched[k], 80);
    throw InputError(where + ": only " + std::to_string(layers.size()) + " of its " + std::to_string(groups.size()) +
                     " LoRA layers match a weight of this " + facts.family_label + " model; " +
                     std::to_string(unmatched.size()) + " match nothing, e.g. " + examples +
                     "; it was made for another model (or another version of it): use a LoRA made for this one");
  }
  // use_dora is one flag of a component's LoraConfig: a layer without a magnitude beside DoRA layers would get
  // PEFT's initial one (the row norms of the weight when the adapter is injected), which dpinfer does not emulate.
  std::map<std::string, std::pair<const LoraLayer*, const LoraLayer*>> dora_and_not;  // per component
  for (const LoraLayer& l : layers) {
    auto& [dora, plain] = dora_and_not[l.component];
    (l.magnitude_key ? dora : plain) = &l;
    if (dora && plain)
      throw InputError(where + ": " + l.component + " layer " + quote(dora->module, 80) + " is a DoRA layer (" +
                       quote(*dora->magnitude_key, 80) + "), but " + quote(plain->module, 80) +
                       " has no lora_magnitude_vector; diffusers would give it one of its own: re-save the LoRA with "
                       "a magnitude for every layer of the component, or none");
  }
  // diffusers lists the layers in the order of the file's keys (safetensors gives them sorted), which
  // its converters keep ("default." dropped after, so the file's own keys).
  std::stable_sort(layers.begin(), layers.end(),
                   [](const LoraLayer& a, const LoraLayer& b) { return a.up_key < b.up_key; });
  // A kohya UNet-family file in the original block names: _maybe_map_sgm_blocks_to_diffusers reorders the keys
  // first, and the converter takes each layer where its lora_down key comes (lora_sgm_order.h). Only SDXL's
  // loader calls that function: StableDiffusionPipeline keeps these names and fails to load the file (PEFT
  // finds none of its target modules), and dpinfer refuses them there (LoraKeyRules::sgm_block_names).
  const std::vector<std::string> order = sgm_mapped_key_order(file_keys);
  std::map<std::string, size_t> place;
  for (size_t i = 0; i < order.size(); ++i) place.emplace(order[i], i);
  if (!order.empty())
    std::stable_sort(layers.begin(), layers.end(), [&](const LoraLayer& a, const LoraLayer& b) {
      return place.at(a.down_key) < place.at(b.down_key);
    });
  return layers;
}

}  // namespace

std::vector<LoraLayer> map_lora_keys(const std::vector<LoraTensorKey>& file_tensors, const LoraModuleTable& modules,
                                     const LoraModelFacts& facts, const std::string& file,
                                     std::vector<std::string>* ignored) {
  // diffusers' pre-PEFT spellings in PEFT's, as every family's loader reads them (peft_spelling); the layers then
  // name the file's own keys, which the merge reads.
  // A text encoder's keys in diffusers' names: the spellings _load_lora_into_text_encoder reads, and the files
  // it fails on or drops layers of (lora_component_spellings.h). FLUX.1's kohya files (a lora_down key) take
  // their own branches, which drop or convert "text_encoder." keys first.
  const bool flux_kohya = facts.rules.kohya_flux &&
                          std::any_of(file_tensors.begin(), file_tensors.end(), [](const LoraTensorKey& t) {
                            return t.key.find(".lora_down.weight") != std::string::npos;
                          });
  if (!flux_kohya) {
    const std::vector<LoraTensorKey> read = without_dora_scales(file_tensors);
    check_text_encoder_spellings(read, facts.rules.components, file);
    for (const std::string& c : facts.rules.components)
      if (!starts_with(c, "text_encoder")) check_denoiser_spellings(read, c, file);
    if (facts.rules.kohya_unet) check_kohya_text_encoder_spellings(read, file);
  }
  std::vector<LoraTensorKey> respelled;
  std::map<std::string, std::string> file_key_of;
  for (const LoraTensorKey& t : file_tensors) {
    const std::string key = peft_spelling(t.key);
    if (key != t.key) file_key_of[key] = t.key;
    respelled.push_back({key, t.shape});
  }
  std::vector<LoraLayer> layers = map_lora_keys_as_spelled(respelled, modules, facts, file, ignored);
  if (file_key_of.empty()) return layers;
  const auto back = [&](std::string& key) {
    if (auto it = file_key_of.find(key); it != file_key_of.end()) key = it->second;
  };
  for (LoraLayer& l : layers) {
    back(l.down_key);
    back(l.up_key);
    if (l.alpha_key) back(*l.alpha_key);
    if (l.magnitude_key) back(*l.magnitude_key);
  }
  return layers;
}

}  // namespace dpinfer::pipeline

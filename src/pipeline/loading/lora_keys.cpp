// Ref: diffusers 0.36 loaders/lora_conversion_utils.py (_maybe_map_sgm_blocks_to_diffusers,
// _convert_non_diffusers_lora_to_diffusers, _convert_unet_lora_key, _convert_text_encoder_lora_key)
// and loaders/lora_pipeline.py (StableDiffusionLoraLoaderMixin.lora_state_dict).
#include "dpinfer/pipeline/loading/lora_keys.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr size_t kMaxListed = 3;

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
                                        {"dora_scale", "DoRA"},
                                        {".lora_mid.", "LoCon with a CP-decomposed (lora_mid) conv"},
                                        {"lora_magnitude_vector", "DoRA"}};

std::string shape_text(const std::vector<int64_t>& shape) {
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
struct Group {
  std::string component;  ///< empty for a kohya name with an unknown prefix
  std::string name;       ///< kohya: underscored; PEFT: dotted
  bool kohya = false;
  std::optional<std::string> down, up, alpha;
  std::string first_key;
};

const char* strip_suffix(const std::string& key, std::initializer_list<const char*> suffixes, std::string* base) {
  for (const char* s : suffixes)
    if (ends_with(key, s)) {
      *base = key.substr(0, key.size() - std::char_traits<char>::length(s));
      return s;
    }
  return nullptr;
}

}  // namespace

std::vector<LoraLayer> map_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                     const LoraModelFacts& facts, const std::string& file) {
  const std::string where = quote(file);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, Group> groups;  // by base name: kohya "lora_unet_x" or PEFT "unet.x"
  std::vector<std::string> not_lora;
  for (const LoraTensorKey& t : keys) {
    shapes[t.key] = t.shape;
    for (const Unsupported& u : kUnsupported)
      if (t.key.find(u.piece) != std::string::npos)
        throw InputError(where + ": a " + std::string(u.what) + " file (key " + quote(t.key, 80) +
                         "); dpinfer reads LoRA (kohya, PEFT) and LoCon files only; convert it or drop it");
    std::string base;
    const char* suffix = strip_suffix(t.key, {".lora_down.weight", ".lora_up.weight", ".alpha", ".lora_A.weight",
                                              ".lora_B.weight", ".lora.down.weight", ".lora.up.weight"},
                                      &base);
    if (!suffix || base.empty()) {
      not_lora.push_back(t.key);
      continue;
    }
    Group& g = groups[base];
    if (g.first_key.empty()) {
      g.first_key = t.key;
      if (base.find('.') == std::string::npos && starts_with(base, "lora_")) {
        g.kohya = true;
        g.name = base;
        for (const KohyaPrefix& k : kKohyaPrefixes)
          if (starts_with(base, k.prefix)) {
            g.component = k.component;
            g.name = base.substr(std::char_traits<char>::length(k.prefix));
            break;
          }
      } else if (const size_t dot = base.find('.'); dot != std::string::npos) {
        g.component = base.substr(0, dot);
        g.name = base.substr(dot + 1);
      } else {
        g.name = base;
      }
    }
    const std::string s = suffix;
    std::optional<std::string>& slot = s == ".alpha" ? g.alpha
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

  std::vector<LoraLayer> layers;
  std::vector<std::string> unmatched;
  std::set<std::string> prefixes;
  for (const auto& [base, g] : groups) {
    if (!g.down || !g.up) {
      throw InputError(where + ": layer " + quote(base, 80) + " has its " + (g.down ? "down (A)" : "up (B)") +
                       " weight but not its " + (g.down ? "up (B)" : "down (A)") + " weight; the file is incomplete");
    }
    prefixes.insert(g.kohya ? base.substr(0, base.find('_', 5) + 1) : g.component + ".");
    std::string module;
    if (auto comp = modules.find(g.component); comp != modules.end()) {
      if (g.kohya) {
        const auto& names = underscored[g.component];
        std::string name = g.name;
        if (g.component == "unet") name = sgm_to_diffusers(name, facts.layers_per_block);
        if (auto it = names.find(name); it != names.end()) module = it->second;
      } else if (comp->second.count(g.name)) {
        module = g.name;
      }
    }
    if (module.empty()) {
      unmatched.push_back(g.first_key);
      continue;
    }
    const std::vector<int64_t>& w = modules.at(g.component).at(module);
    const std::vector<int64_t>& down = shapes[*g.down];
    const std::vector<int64_t>& up = shapes[*g.up];
    bool fits = false;
    if (w.size() == 2) fits = down.size() == 2 && up.size() == 2 && down[1] == w[1] && up[0] == w[0] && up[1] == down[0];
    if (w.size() == 4)
      fits = down.size() == 4 && up.size() == 4 && down[1] == w[1] && down[2] == w[2] && down[3] == w[3] &&
             up[0] == w[0] && up[1] == down[0] && up[2] == 1 && up[3] == 1;
    if (!fits || down.empty() || down[0] < 1)
      throw InputError(where + ": layer " + quote(base, 80) + " has down " + shape_text(down) + " and up " +
                       shape_text(up) + ", which do not fit " + g.component + "." + module + ".weight " +
                       shape_text(w) + " (expected down [r, " + std::to_string(w.size() > 1 ? w[1] : 0) +
                       (w.size() == 4 ? ", " + std::to_string(w[2]) + ", " + std::to_string(w[3]) : std::string()) +
                       "] and up [" + std::to_string(w[0]) + ", r" + (w.size() == 4 ? ", 1, 1" : "") +
                       "]); is it a LoRA for another model?");
    if (g.alpha) {
      const std::vector<int64_t>& a = shapes[*g.alpha];
      int64_t n = 1;
      for (int64_t d : a) n *= d;
      if (n != 1)
        throw InputError(where + ": " + quote(*g.alpha, 80) + " has shape " + shape_text(a) +
                         "; an alpha is one number");
    }
    layers.push_back({g.component, module, *g.down, *g.up, g.alpha, down[0]});
  }
  std::string found;
  for (const std::string& p : prefixes) found += (found.empty() ? "" : ", ") + p;
  if (layers.empty()) {
    const bool dit = prefixes.count("transformer.") || prefixes.count("lora_transformer_") ||
                     prefixes.count("diffusion_model.");
    throw InputError(where + ": none of its " + std::to_string(groups.size()) + " LoRA layer(s) match a weight of this " +
                     facts.family_label + " model (its keys start with " + found + ", e.g. " +
                     quote(unmatched.front(), 80) + ")" +
                     (dit ? "; it is a LoRA for a transformer (DiT) model, not for a UNet one"
                          : "; it is a LoRA for another model or family") +
                     ": use a LoRA made for " + facts.family_label);
  }
  if (!unmatched.empty()) {
    std::string examples;
    for (size_t k = 0; k < unmatched.size() && k < kMaxListed; ++k)
      examples += (k ? ", " : "") + quote(unmatched[k], 80);
    throw InputError(where + ": only " + std::to_string(layers.size()) + " of its " + std::to_string(groups.size()) +
                     " LoRA layers match a weight of this " + facts.family_label + " model; " +
                     std::to_string(unmatched.size()) + " match nothing, e.g. " + examples +
                     "; it was made for another model (or another version of it): use a LoRA made for this one");
  }
  return layers;
}

}  // namespace dpinfer::pipeline

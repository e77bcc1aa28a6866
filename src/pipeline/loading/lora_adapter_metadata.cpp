// Ref: diffusers 0.36 loaders/peft.py load_lora_adapter, utils/peft_utils.py _create_lora_config;
// peft 0.17.1 tuners/lora/model.py _create_and_replace, utils/other.py get_pattern_key,
// tuners/tuners_utils.py check_target_module_exists (a list of target_modules).
#include "dpinfer/pipeline/loading/lora_adapter_metadata.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using ordered_json = nlohmann::ordered_json;

/// What to do about metadata dpinfer refuses, for every message.
constexpr const char* kResave =
    "re-save the LoRA with diffusers' save_lora_weights, or fuse it into the model with diffusers";

bool is_pattern_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

/// key[from:] against a literal pattern whose '.' matches any one character, as a whole.
bool literal_matches(const std::string& pattern, size_t pattern_from, const std::string& key, size_t from) {
  if (key.size() - from != pattern.size() - pattern_from) return false;
  for (size_t i = 0; i < key.size() - from; ++i) {
    const char p = pattern[pattern_from + i];
    if (p != '.' && p != key[from + i]) return false;
  }
  return true;
}

}  // namespace

bool lora_pattern_matches(const std::string& key, const std::string& module) {
  // (.*\.)? consumes nothing or a prefix that ends with a literal '.'; a '^' in the second group
  // then only holds at the start. '$' after a whole match of the rest (module names hold no '\n').
  const bool anchored = !key.empty() && key[0] == '^';
  const size_t from = anchored ? 1 : 0;
  if (literal_matches(key, from, module, 0)) return true;
  if (anchored) return false;
  for (size_t i = 1; i < module.size(); ++i)
    if (module[i - 1] == '.' && literal_matches(key, from, module, i)) return true;
  return false;
}

LoraAdapterMetadata LoraAdapterMetadata::parse(const std::string& text, const std::string& file) {
  const std::string where = quote(file) + ": its lora_adapter_metadata";
  const ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw InputError(where + " is not a JSON object; " + kResave);
  LoraAdapterMetadata out;
  out.file_ = file;
  std::map<std::string, ordered_json> fields;  // component -> {field: value}
  for (const auto& [key, value] : j.items()) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos || dot == 0) continue;  // diffusers reads "<component>." keys only
    fields[key.substr(0, dot)][key.substr(dot + 1)] = value;
  }
  for (const auto& entry : fields) {
    const std::string& component = entry.first;  // named, not bound: C++17 lambdas cannot capture bindings
    const ordered_json& f = entry.second;
    // "'f': its lora_adapter_metadata's 'transformer.r'": the names are the file's, quoted.
    const auto field = [&](const std::string& name) { return where + "'s " + quote(component + "." + name, 120); };
    const auto integer = [&](const ordered_json& v, const std::string& name) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 20))
        throw InputError(field(name) + " is " + quote(v.dump(), 40) + ", not a positive integer rank; " + kResave);
      return v.get<int64_t>();
    };
    const auto number = [&](const ordered_json& v, const std::string& name) {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        throw InputError(field(name) + " is " + quote(v.dump(), 40) + ", not a finite number; " + kResave);
      return v.get<double>();
    };
    const auto pattern_key = [&](const std::string& k, const std::string& name) {
      const size_t start = !k.empty() && k[0] == '^' ? 1 : 0;
      bool literal = k.size() > start;
      for (size_t i = start; i < k.size(); ++i) literal = literal && is_pattern_char(k[i]);
      if (!literal)
        throw InputError(field(name) + " key " + quote(k, 80) +
                         " is a regular expression; dpinfer reads module names (with '.' and a leading '^') only; " +
                         kResave);
    };
    if (!f.contains("r") || !f.contains("lora_alpha"))
      throw InputError(field(f.contains("r") ? "lora_alpha" : "r") + " is missing; " + kResave);
    LoraAdapterConfig c;
    c.r = integer(f.at("r"), "r");
    c.lora_alpha = number(f.at("lora_alpha"), "lora_alpha");
    for (const char* name : {"rank_pattern", "alpha_pattern"}) {
      if (!f.contains(name) || f.at(name).is_null()) continue;
      if (!f.at(name).is_object()) throw InputError(field(name) + " is not a JSON object; " + kResave);
      for (const auto& [k, v] : f.at(name).items()) {
        pattern_key(k, name);
        if (std::string(name) == "rank_pattern")
          c.rank_pattern.emplace_back(k, integer(v, std::string(name) + "." + k));
        else
          c.alpha_pattern.emplace_back(k, number(v, std::string(name) + "." + k));
      }
    }
    // What changes the delta in a way dpinfer's merge does not compute.
    if (f.contains("use_dora") && !f.at("use_dora").is_null()) {
      if (!f.at("use_dora").is_boolean()) throw InputError(field("use_dora") + " is not true or false; " + kResave);
      c.use_dora = f.at("use_dora").get<bool>();
    }
    for (const char* flag : {"lora_bias", "use_rslora"}) {
      if (f.contains(flag) && f.at(flag).is_boolean() && f.at(flag).get<bool>())
        throw InputError(
            field(flag) + " is true, which dpinfer does not read" +
            (std::string(flag) == "use_rslora"
                 ? " (peft 0.17 scales such a layer by alpha / sqrt(r), or by alpha / r after set_adapters)"
                 : "") +
            "; fuse the LoRA into the model with diffusers");
    }
    for (const char* subset : {"layers_to_transform", "layers_pattern", "exclude_modules"}) {
      if (f.contains(subset) && !f.at(subset).is_null() && !(f.at(subset).is_array() && f.at(subset).empty()) &&
          !(f.at(subset).is_string() && f.at(subset).get<std::string>().empty()))
        throw InputError(field(subset) + " limits the layers the LoRA changes, which dpinfer does not read; " +
                         kResave);
    }
    if (f.contains("target_modules") && f.at("target_modules").is_array()) {
      std::vector<std::string> targets;
      for (const ordered_json& t : f.at("target_modules")) {
        if (!t.is_string())
          throw InputError(field("target_modules") + " holds " + quote(t.dump(), 40) + ", not a name; " + kResave);
        targets.push_back(t.get<std::string>());
      }
      c.target_modules = std::move(targets);
    }
    out.configs_.emplace(component, std::move(c));
  }
  return out;
}

LoraLayerScale LoraAdapterMetadata::scale_of(const std::string& component, const std::string& module) const {
  const auto it = configs_.find(component);
  if (it == configs_.end())
    throw InputError(quote(file_) + ": its lora_adapter_metadata configures no " + component +
                     ", but the file has " + component + " layers (diffusers cannot load it either); " + kResave);
  const LoraAdapterConfig& c = it->second;
  if (c.target_modules) {
    bool targeted = false;
    for (const std::string& t : *c.target_modules) targeted = targeted || module == t || ends_with(module, "." + t);
    if (!targeted)
      throw InputError(quote(file_) + ": layer " + quote(component + "." + module, 120) +
                       " is not among its lora_adapter_metadata's target_modules, so diffusers would leave it out; " +
                       kResave);
  }
  return lora_layer_scale(c, module);
}

LoraLayerScale lora_layer_scale(const LoraAdapterConfig& c, const std::string& module) {
  LoraLayerScale s{c.lora_alpha, c.r};
  for (const auto& [key, rank] : c.rank_pattern)
    if (lora_pattern_matches(key, module)) {
      s.rank = rank;
      break;
    }
  for (const auto& [key, alpha] : c.alpha_pattern)
    if (lora_pattern_matches(key, module)) {
      s.alpha = alpha;
      break;
    }
  return s;
}

namespace {

/// collections.Counter(values).most_common()[0][0]: the most frequent, the first seen among ties.
template <typename T>
T most_common(const std::vector<T>& values) {
  std::vector<std::pair<T, size_t>> counts;  // in first-seen order
  for (const T& v : values) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == v; });
    if (it == counts.end()) counts.emplace_back(v, 1);
    else ++it->second;
  }
  auto best = counts.begin();
  for (auto it = counts.begin(); it != counts.end(); ++it)
    if (it->second > best->second) best = it;
  return best->first;
}

}  // namespace

LoraAdapterConfig infer_lora_adapter_config(const std::vector<LoraLayerFacts>& layers,
                                            const std::vector<LoraNetworkAlpha>& alphas, bool alphas_are_tensors) {
  LoraAdapterConfig c;
  if (layers.empty()) return c;
  std::vector<int64_t> ranks;
  for (const LoraLayerFacts& l : layers) ranks.push_back(l.rank);
  c.lora_alpha = static_cast<double>(ranks.front());  // r = lora_alpha = list(rank_dict.values())[0]
  c.r = most_common(ranks);
  for (const LoraLayerFacts& l : layers)
    if (l.rank != c.r) c.rank_pattern.emplace_back("^" + l.module, l.rank);
  if (alphas.empty()) return c;
  std::vector<double> values;
  for (const LoraNetworkAlpha& a : alphas) values.push_back(a.value);
  c.lora_alpha = alphas_are_tensors ? values.front() : most_common(values);
  for (const LoraNetworkAlpha& a : alphas) {
    if (!a.module || a.value == c.lora_alpha) continue;
    auto it = std::find_if(c.alpha_pattern.begin(), c.alpha_pattern.end(),
                           [&](const auto& entry) { return entry.first == *a.module; });
    if (it == c.alpha_pattern.end()) c.alpha_pattern.emplace_back(*a.module, a.value);
    else it->second = a.value;
  }
  return c;
}

LoraAdapterConfig infer_lora_adapter_config(const std::vector<LoraLayerFacts>& layers, bool alphas_are_tensors) {
  std::vector<LoraNetworkAlpha> alphas;
  for (const LoraLayerFacts& l : layers)
    if (l.network_alpha) alphas.push_back({l.module, *l.network_alpha});
  return infer_lora_adapter_config(layers, alphas, alphas_are_tensors);
}

}  // namespace dpinfer::pipeline

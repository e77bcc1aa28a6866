#pragma once
// The PEFT adapter config that diffusers writes into a LoRA file's safetensors header, and the
// alpha and rank it gives each layer. Without LibTorch (tests/unit/test_lora_adapter_metadata.cpp).
//
// Ref: diffusers 0.36 loaders/lora_base.py (_pack_dict_with_prefix, write_lora_layers: the header
// entry "lora_adapter_metadata" holds json.dumps of {"<component>.<LoraConfig field>": value},
// e.g. "transformer.r", "transformer.lora_alpha", "transformer.rank_pattern"), loaders/peft.py
// load_lora_adapter and utils/peft_utils.py _create_lora_config: when a file has that entry,
// diffusers builds each component's LoraConfig from it instead of from the tensors, so a layer's
// scaling is lora_alpha / r with peft 0.17's per-module patterns (tuners/lora/model.py
// _create_and_replace, utils/other.py get_pattern_key: the first pattern key K, in the file's
// order, for which re.match(rf"(.*\.)?({K})$", module) holds).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dpinfer::pipeline {

/// The LoraConfig of one component, as far as it decides a layer's weight delta.
struct LoraAdapterConfig {
  int64_t r = 0;
  double lora_alpha = 0;
  std::vector<std::pair<std::string, int64_t>> rank_pattern;  ///< in the file's order
  std::vector<std::pair<std::string, double>> alpha_pattern;  ///< in the file's order
  /// target_modules as a list (a module is targeted when it is one of them or ends with "." + one);
  /// nullopt when the metadata gives none or gives a regular expression (a string).
  std::optional<std::vector<std::string>> target_modules;
  /// DoRA: every layer merges with its lora_magnitude_vector (peft 0.17 DoraLinearVariant / _DoraConvNdVariant).
  bool use_dora = false;
};

/// A layer's alpha and rank, as PEFT builds the layer from the config.
struct LoraLayerScale {
  double alpha = 0;
  int64_t rank = 0;
};

class LoraAdapterMetadata {
 public:
  /// Parses the text of a file's "lora_adapter_metadata" header entry; `file` names it in messages.
  /// Throws InputError (one line) for: text that is not a JSON object; a component without "r" or
  /// "lora_alpha", or with values of the wrong type; the settings dpinfer cannot merge as diffusers
  /// does (lora_bias, use_rslora: peft 0.17 scales an rsLoRA layer by alpha / sqrt(r)
  /// when it is built and by alpha / r after set_adapters, so diffusers' result depends on the
  /// calls made); and pattern keys that use regular-expression syntax beyond literal names, '.'
  /// and a leading '^' (dpinfer matches those itself, exactly as re.match would).
  static LoraAdapterMetadata parse(const std::string& text, const std::string& file);

  /// Whether the metadata configures `component` ("transformer", "unet", "text_encoder", ...).
  bool configures(const std::string& component) const { return configs_.count(component) > 0; }

  /// Whether `component`'s config says use_dora (false where it configures no such component).
  bool uses_dora(const std::string& component) const {
    const auto it = configs_.find(component);
    return it != configs_.end() && it->second.use_dora;
  }

  /// The alpha and rank PEFT gives `module` (its name within `component`). Throws InputError when
  /// the metadata has no config for `component` (diffusers fails on such a file) or its
  /// target_modules do not include `module` (diffusers would leave that layer out).
  LoraLayerScale scale_of(const std::string& component, const std::string& module) const;

 private:
  std::string file_;
  std::map<std::string, LoraAdapterConfig> configs_;
};

/// The alpha and rank PEFT gives `module` under config `c`: the first rank_pattern / alpha_pattern
/// key that matches it (lora_pattern_matches), else r / lora_alpha.
LoraLayerScale lora_layer_scale(const LoraAdapterConfig& c, const std::string& module);

/// One layer of a component, as diffusers' get_peft_kwargs sees it in a file without adapter metadata.
struct LoraLayerFacts {
  std::string module;
  int64_t rank = 0;
  /// The layer's alpha where diffusers passes it on as a "network alpha" (a FLUX.1 file's `.alpha`
  /// tensors, a kohya file's alphas); none where the file has none or its converter folded it into
  /// the factors or dropped it.
  std::optional<double> network_alpha;
};

/// One network alpha as diffusers' get_peft_kwargs reads it, in the order of its network_alphas dict.
struct LoraNetworkAlpha {
  /// The alpha_pattern key diffusers makes of the alpha's name: the layer's module, or none where that
  /// key names no module (LoraLayer::alpha_reaches_no_module): the alpha still counts for the most common.
  std::optional<std::string> module;
  double value = 0;
};

/// The LoraConfig diffusers 0.36 infers for one component from its layers, in the order diffusers
/// lists their ranks, and its network alphas, in the order of its network_alphas dict (a kohya
/// converter's: the file's keys, where a text encoder's ranks follow its named_modules order):
///  - r, rank_pattern and, without alphas, lora_alpha as below;
///  - with alphas: lora_alpha the most common of `alphas` (the first, for tensors), alpha_pattern a dict
///    "<module>" -> alpha (a repeated key keeps its first place and takes the last value) for the
///    others that name a module.
LoraAdapterConfig infer_lora_adapter_config(const std::vector<LoraLayerFacts>& layers,
                                            const std::vector<LoraNetworkAlpha>& alphas, bool alphas_are_tensors);

/// The same, with each layer's network_alpha under its own module, in the layers' order
/// (utils/peft_utils.py get_peft_kwargs):
///  - r: the most common rank (the first seen of those tied); rank_pattern "^<module>" for the others;
///  - lora_alpha: the first layer's rank when no layer has a network alpha. Otherwise the most common
///    alpha, with alpha_pattern "<module>" (unanchored: it also matches modules named like a '.'-suffix
///    of it) for the layers of another alpha. `alphas_are_tensors`: the loader keeps the alphas as
///    tensors (FluxLoraLoaderMixin), which hash by identity, so "most common" is the first layer's
///    alpha and the pattern lists every layer whose alpha differs from it.
LoraAdapterConfig infer_lora_adapter_config(const std::vector<LoraLayerFacts>& layers, bool alphas_are_tensors);

/// Whether peft 0.17's get_pattern_key would pick pattern key `key` for `module`:
/// re.match(rf"(.*\.)?({key})$", module), for keys of letters, digits, '_', '.' (any character)
/// and an optional leading '^'. Exposed for its unit test.
bool lora_pattern_matches(const std::string& key, const std::string& module);

}  // namespace dpinfer::pipeline

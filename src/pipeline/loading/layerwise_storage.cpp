#include "dpinfer/pipeline/loading/layerwise_storage.h"

#include <map>
#include <memory>
#include <regex>

#include <torch/nn/module.h>

#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// Whether `name` or a module enclosing it ("a", "a.b" of "a.b.c") matches one of `patterns`
/// by Python's re.search: diffusers tests each module on its way down and skips the whole
/// subtree of a match, so an anchored pattern such as "^proj_out$" skips "proj_out" and
/// everything under it, and nothing else.
bool skipped(const std::string& name, const std::vector<std::regex>& patterns) {
  for (size_t end = name.find('.');; end = name.find('.', end + 1)) {
    const std::string prefix = name.substr(0, end);
    for (const std::regex& p : patterns)
      if (std::regex_search(prefix, p)) return true;
    if (end == std::string::npos) return false;
  }
}

}  // namespace

const std::vector<std::string>& default_layerwise_skip_patterns() {
  // Ref: diffusers 0.36.0 hooks/layerwise_casting.py DEFAULT_SKIP_MODULES_PATTERN.
  static const std::vector<std::string> patterns{"pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$"};
  return patterns;
}

std::vector<std::string> layerwise_stored_layers(const torch::nn::Module& module,
                                                 const std::vector<std::string>& class_patterns) {
  std::vector<std::regex> patterns;
  for (const auto* list : {&default_layerwise_skip_patterns(), &class_patterns})
    for (const std::string& p : *list) patterns.emplace_back(p, std::regex::ECMAScript);
  std::vector<std::string> names;
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    const torch::nn::Module& m = *item.value();
    if (!dynamic_cast<const nn::LinearImpl*>(&m) && !dynamic_cast<const nn::Conv2dImpl*>(&m)) continue;
    if (!skipped(item.key(), patterns)) names.push_back(item.key());
  }
  return names;
}

int64_t store_layers(torch::nn::Module& module, const std::vector<std::string>& names, c10::ScalarType storage,
                     c10::ScalarType compute) {
  std::map<std::string, std::shared_ptr<torch::nn::Module>> by_name;
  for (const auto& item : module.named_modules("", false)) by_name.emplace(item.key(), item.value());
  int64_t bytes = 0;
  for (const std::string& name : names) {
    auto it = by_name.find(name);
    auto* layer = it == by_name.end() ? nullptr : dynamic_cast<nn::WeightedLayer*>(it->second.get());
    if (!layer) throw Error("layerwise storage: no Linear or Conv2d named " + quote(name));
    layer->store_as(storage, compute);
    bytes += layer->weight.nbytes() + (layer->bias.defined() ? layer->bias.nbytes() : 0);
  }
  return bytes;
}

c10::ScalarType parse_weight_storage(const std::string& value) {
  if (value.empty() || value == "default") return c10::ScalarType::Undefined;
  if (value == "fp8" || value == "fp8-denoiser") return c10::ScalarType::Float8_e4m3fn;
  throw InputError("--weight-storage: expected default, fp8 or fp8-denoiser, got " + quote(value, 60));
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/lora_inspect.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <set>
#include <sstream>

#include "dpinfer/io/lora_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/loading/lora_nearest_spelling.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using ordered_json = nlohmann::ordered_json;

/// 0.5, 8, 0.3333.
std::string number(double v) { return fmt::format("{:.4g}", v); }

std::string range(const std::set<double>& values) {
  return values.size() == 1 ? number(*values.begin()) : number(*values.begin()) + "-" + number(*values.rbegin());
}

/// The scaling diffusers gives the layers of one component: alpha / rank per layer (PEFT's
/// lora_alpha / r; the LoRA's scale multiplies it).
std::string scaling_text(const std::vector<const LoraLayerScaling*>& layers) {
  std::set<double> alphas, scales;
  bool all_rank = true, folded = false;
  for (const LoraLayerScaling* l : layers) {
    folded = folded || l->layer.alpha_in_factors;
    if (l->layer.alpha_in_factors) continue;
    alphas.insert(l->alpha);
    scales.insert(l->alpha / static_cast<double>(l->layer.rank));
    all_rank = all_rank && l->alpha == static_cast<double>(l->layer.rank);
  }
  std::string out;
  if (!alphas.empty())
    out = all_rank ? "alpha = rank (scale 1)"
                   : (alphas.size() == 1 ? "alpha " : "alphas ") + range(alphas) + " (scale " + range(scales) + ")";
  // get_alpha_scales: the converter multiplies alpha / rank into the factors; the adapter's alpha is the rank.
  if (folded) out += (out.empty() ? "" : "; ") + std::string("alpha / rank folded into the factors by the converter");
  // PEFT's DoRA layers: the merge rescales each output row of W + dW to the file's magnitude (lora.h).
  if (std::any_of(layers.begin(), layers.end(), [](const LoraLayerScaling* l) { return l->layer.magnitude_key; }))
    out += (out.empty() ? "" : "; ") + std::string("DoRA (magnitudes from its lora_magnitude_vector)");
  return out;
}

}  // namespace

LoraReport inspect_lora(const io::LoraRef& ref, const LoraModelFacts& facts,
                        const std::map<std::string, std::shared_ptr<torch::nn::Module>>& components,
                        const std::set<std::string>& unfused) {
  LoraReport r;
  r.given = ref.path;
  r.scale = ref.scale;
  for (const std::string& name : facts.rules.components)
    if (components.count(name)) {
      LoraComponentReport c;
      c.name = name;
      c.unfused = unfused.count(name) > 0;
      r.components.push_back(c);
    }
  try {
    r.path = io::find_lora_file(ref.path, "--lora");
    LoraMerger merger(facts);
    for (const std::string& name : facts.rules.components) {
      auto it = components.find(name);
      if (it == components.end()) continue;  // a component the model lacks (Chroma has no CLIP)
      if (!it->second) throw Error("--lora " + quote(r.path) + ": not checked, the model's " + name + " does not load");
      merger.add_component(name, *it->second);
    }
    for (LoraComponentReport& c : r.components) c.modules = static_cast<int64_t>(merger.modules().at(c.name).size());
    const auto file = io::SafetensorsFile::open(r.path);
    const std::vector<LoraTensorKey> keys = lora_tensor_keys(*file);
    r.format = lora_format(keys, facts.rules);
    LoraFilePlan plan;
    try {
      plan = merger.plan(*file, r.path);
    } catch (const InputError& e) {
      // What the file comes nearest to among the spellings this family reads, and how it differs.
      const LoraNearestSpelling nearest = nearest_lora_spelling(without_dora_scales(keys), facts.rules);
      r.nearest_spelling = nearest.spelling;
      r.nearest_differs = nearest.differs;
      throw InputError("--lora: " + std::string(e.what()));  // as `dpinfer generate --lora` says it
    }
    r.has_alphas = plan.has_alphas;
    r.has_adapter_metadata = plan.has_adapter_metadata;
    r.ignored = plan.ignored;
    for (LoraComponentReport& c : r.components) {
      std::vector<const LoraLayerScaling*> layers;
      for (const LoraLayerScaling& l : plan.layers)
        if (l.layer.component == c.name) layers.push_back(&l);
      c.layers = static_cast<int64_t>(layers.size());
      for (const LoraLayerScaling* l : layers) {
        c.min_rank = c.min_rank ? std::min(c.min_rank, l->layer.rank) : l->layer.rank;
        c.max_rank = std::max(c.max_rank, l->layer.rank);
      }
      c.scaling = scaling_text(layers);
    }
  } catch (const std::exception& e) {
    r.error = first_line(e.what());
  }
  return r;
}

ordered_json LoraReport::to_json() const {
  ordered_json j;
  j["lora"] = given;
  j["scale"] = scale;
  j["path"] = path.empty() ? ordered_json(nullptr) : ordered_json(path);
  j["format"] = format.empty() ? ordered_json(nullptr) : ordered_json(format);
  ordered_json cs = ordered_json::object();
  for (const LoraComponentReport& c : components)
    cs[c.name] = {{"layers", c.layers},     {"modules", c.modules}, {"min_rank", c.min_rank},
                  {"max_rank", c.max_rank}, {"scaling", c.scaling}, {"unfused", c.unfused}};
  j["components"] = cs;
  j["alphas"] = has_alphas;
  j["adapter_metadata"] = has_adapter_metadata;
  j["ignored"] = ignored;
  j["ok"] = error.empty();
  j["error"] = error.empty() ? ordered_json(nullptr) : ordered_json(error);
  j["nearest_spelling"] = nearest_spelling.empty()
                              ? ordered_json(nullptr)
                              : ordered_json{{"spelling", nearest_spelling}, {"differs", nearest_differs}};
  return j;
}

void LoraReport::to_text(std::ostream& out) const {
  out << "\nlora: " << given << (scale != 1.0 ? " (scale " + number(scale) + ")" : "") << "\n";
  if (!path.empty() && path != given) out << "  file: " << path << "\n";
  if (!format.empty()) out << "  format: " << format << "\n";
  if (error.empty()) {
    for (const LoraComponentReport& c : components) {
      out << "  " << c.name << ": " << c.layers << " of " << c.modules << " LoRA-able layers";
      if (c.layers) out << ", " << rank_text(c.min_rank, c.max_rank) << ", " << c.scaling;
      if (c.layers && c.unfused) out << "; applied unfused beside its stored weights";
      out << "\n";
    }
    out << "  alphas: "
        << (has_adapter_metadata ? "from its lora_adapter_metadata"
                                 : has_alphas ? "from its .alpha tensors" : "none (alpha = rank, or as inferred)")
        << "\n";
    for (const std::string& line : ignored) out << "  dropped (warned about): " << line << "\n";
  } else {
    out << "  error: " << error << "\n";
    if (!nearest_spelling.empty())
      out << "  nearest spelling: " << nearest_spelling << "\n  differs: " << nearest_differs << "\n";
  }
}

std::optional<LoraFileReport> lora_file_report(const std::string& path) {
  try {
    LoraFileReport r = describe_lora_file(path);
    if (!r.names.components.empty()) return r;
  } catch (const Error&) {
  }
  return std::nullopt;
}

LoraFileReport describe_lora_file(const std::string& path) {
  const auto file = io::SafetensorsFile::open(path);
  LoraFileReport r;
  r.path = path;
  const std::vector<LoraTensorKey> keys = lora_tensor_keys(*file);
  r.tensors = static_cast<int64_t>(keys.size());
  r.names = describe_lora_names(keys);
  auto it = file->metadata().find("lora_adapter_metadata");
  r.has_adapter_metadata = it != file->metadata().end() && !it->second.empty();
  return r;
}

ordered_json LoraFileReport::to_json() const {
  ordered_json j;
  j["lora"] = path;
  j["format"] = names.format;
  j["families"] = names.families;
  ordered_json cs = ordered_json::object();
  for (const auto& [name, c] : names.components)
    cs[name] = {{"layers", c.layers}, {"min_rank", c.min_rank}, {"max_rank", c.max_rank}};
  j["components"] = cs;
  j["alphas"] = names.has_alphas;
  j["adapter_metadata"] = has_adapter_metadata;
  j["tensors"] = tensors;
  return j;
}

std::string LoraFileReport::to_text() const {
  std::ostringstream out;
  out << "lora: " << path << "\n";
  out << "format: " << names.format << " (by its key names)\n";
  for (const std::string& f : names.families) out << "names suggest: " << f << "\n";
  if (names.families.empty()) out << "names suggest: no family dpinfer knows\n";
  for (const auto& [name, c] : names.components)
    out << "  " << name << ": " << c.layers << " layers, " << rank_text(c.min_rank, c.max_rank) << "\n";
  out << "alphas: " << (names.has_alphas ? "yes (.alpha tensors)" : "none") << "\n";
  out << "lora_adapter_metadata: " << (has_adapter_metadata ? "yes (it decides the alphas)" : "none") << "\n";
  out << "\ncheck it against a model: dpinfer inspect MODEL --lora " << path << "\n";
  return out.str();
}

}  // namespace dpinfer::pipeline

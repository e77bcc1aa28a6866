#include "dpinfer/pipeline/inspect.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/gguf_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/layerwise_storage.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/pipeline/nn/offload.h"
#include "dpinfer/pipeline/scheduler_settings.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

constexpr size_t kMaxListedKeys = 10;

/// Records a failed step: `message` goes to `own` (the component's error, when it has none
/// yet) and to the report's error (when it is the first).
void record(InspectReport& report, std::string* own, std::string message, bool bad_input) {
  message = first_line(message);
  if (own && own->empty()) *own = message;
  if (report.error.empty()) {
    report.error = message;
    report.bad_input = bad_input;
  }
}

/// Runs one step of the load; a failure is record()ed. Returns whether it passed.
bool step(InspectReport& report, std::string* own, const std::function<void()>& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    record(report, own, e.what(), true);
  } catch (const std::exception& e) {
    record(report, own, e.what(), false);
  }
  return false;
}

/// Whether `path` is a folder: the weights of a component whose folder is missing (or not
/// known, when model_index.json did not name it) are not looked for.
bool is_folder(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec);
}

/// The order components with weights load in: text encoders, then denoisers, then VAEs,
/// each in the family's order.
int load_rank(ComponentRole role) {
  switch (role) {
    case ComponentRole::kTextEncoder: return 0;
    case ComponentRole::kDenoiser: return 1;
    case ComponentRole::kVae: return 2;
    default: return 3;
  }
}

/// The elements of `module`'s offloadable blocks (`<list>.<index>.` parameters and buffers of the lists
/// nn::OffloadableBlocks names), for the memory plan's --offload blocks (memory_plan.h).
void count_block_elements(ComponentReport& r, torch::nn::Module& module, const std::set<std::string>& stored) {
  const auto* offloadable = dynamic_cast<const nn::OffloadableBlocks*>(&module);
  if (!offloadable) return;
  std::map<std::string, std::pair<int64_t, int64_t>> blocks;  // "transformer_blocks.3" -> {elements, stored}
  auto add = [&](const std::string& name, const at::Tensor& t, bool is_stored) {
    for (const std::string& list : offloadable->block_lists()) {
      if (!starts_with(name, list + ".")) continue;
      const size_t dot = name.find('.', list.size() + 1);
      if (dot == std::string::npos) return;
      auto& b = blocks[name.substr(0, dot)];
      b.first += t.numel();
      if (is_stored) b.second += t.numel();
      return;
    }
  };
  for (const auto& p : module.named_parameters()) add(p.key(), p.value(), stored.count(p.key()) > 0);
  for (const auto& b : module.named_buffers()) add(b.key(), b.value(), false);
  for (const auto& [name, counts] : blocks) {
    r.block_elements += counts.first;
    r.block_stored_elements += counts.second;
    if (counts.first > r.largest_block_elements) {
      r.largest_block_elements = counts.first;
      r.largest_block_stored_elements = counts.second;
    }
  }
}

/// The component's files and their header statistics, then the key check against the
/// module its class builds on the meta device (skipped when its config failed). The order
/// is load_component()'s: build, find the files, check the keys.
void check_weights(InspectReport& report, ComponentReport& r, const Component& c, const std::string& variant,
                   const ModelClass* model_class, bool config_ok, std::shared_ptr<torch::nn::Module>& module) {
  bool built = false;
  if (model_class && config_ok)
    built = step(report, &r.error, [&] { module = model_class->build(c.config, at::TensorOptions().device(at::kMeta)); });
  if (built) {
    for (const at::Tensor& t : module->parameters()) r.module_elements += t.numel();
    for (const at::Tensor& t : module->buffers()) r.module_elements += t.numel();
    std::set<std::string> stored;
    for (const std::string& layer : layerwise_stored_layers(*module, model_class->layerwise_casting_skip))
      stored.insert({layer + ".weight", layer + ".bias"});
    for (const auto& p : module->named_parameters())
      if (stored.count(p.key())) r.stored_elements += p.value().numel();
    count_block_elements(r, *module, stored);
  }
  r.variant = c.variant;
  r.fell_back = !variant.empty() && c.variant.empty();
  WeightFiles found;
  KeyConverter convert;
  r.source = c.source;
  if (!c.single_file.empty()) {
    found.files = {c.single_file};
    if (!step(report, &r.error, [&] { convert = single_file_converter(c); })) return;
  } else if (!step(report, &r.error, [&] { found = find_weight_files(c.path, c.variant); })) {
    return;
  }
  r.files = found.files;
  r.index = found.index;
  bool readable = step(report, &r.error, [&] {
    for (const std::string& path : found.files) {
      if (io::GgufFile::has_magic(path)) {
        // A GGUF transformer file: its tensors by ggml type ("Q4_K", "F32"), counted in values.
        auto file = io::GgufFile::open(path);
        for (const io::GgufTensor& t : file->tensors()) {
          if (!c.key_prefix.empty() && !starts_with(t.name, c.key_prefix)) continue;
          r.bytes += t.nbytes;
          r.gguf_bytes += static_cast<int64_t>(t.nbytes);
          DtypeCount& count = r.dtypes[std::string(io::ggml_type_name(t.type))];
          ++count.tensors;
          count.parameters += t.numel();
          r.parameters += t.numel();
        }
        continue;
      }
      auto file = io::SafetensorsFile::open(path);
      if (c.key_prefix.empty()) r.bytes += file->file_size();
      for (const io::TensorView& t : file->tensors())
        if (!c.key_prefix.empty() && starts_with(t.name, c.key_prefix)) r.bytes += t.nbytes;
      for (const io::TensorView& t : file->tensors()) {
        if (!c.key_prefix.empty() && !starts_with(t.name, c.key_prefix)) continue;  // another component's
        DtypeCount& count = r.dtypes[std::string(io::dtype_name(t.dtype))];
        ++count.tensors;
        count.parameters += t.numel();
        r.parameters += t.numel();
      }
    }
  });
  if (!readable || !built) return;
  step(report, &r.error, [&] {
    r.keys = match_keys(*module, found.files, component_key_renames(c, model_class->renames), c.name, convert);
    if (!r.keys->ok()) throw Error(key_mismatch_message(*r.keys, found.files, c.name));
  });
}

/// `object[key]` when it is a string, else `fallback` (a wrong type is the loader's to report).
std::string string_field(const nlohmann::json& object, const char* key, const std::string& fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

ordered_json or_null(const std::string& s) { return s.empty() ? ordered_json(nullptr) : ordered_json(s); }

ordered_json first(const std::vector<std::string>& items) {
  return std::vector<std::string>(items.begin(), items.begin() + std::min(items.size(), kMaxListedKeys));
}

ordered_json component_json(const ComponentReport& r) {
  ordered_json j;
  j["class"] = r.class_name;
  j["library"] = r.library;
  j["path"] = r.path;
  j["source"] = or_null(r.source);
  j["config"] = r.config;
  ordered_json w;
  w["files"] = r.files;
  w["index"] = or_null(r.index);
  w["variant"] = or_null(r.variant);
  w["fell_back"] = r.fell_back;
  w["parameters"] = r.parameters;
  w["bytes"] = r.bytes;
  ordered_json dtypes = ordered_json::object();
  for (const auto& [name, count] : r.dtypes)
    dtypes[name] = {{"tensors", count.tensors}, {"parameters", count.parameters}};
  w["dtypes"] = dtypes;
  j["weights"] = w;
  j["module"] = {{"elements", r.module_elements}, {"fp8_stored_elements", r.stored_elements}};
  if (r.keys) {
    const KeyReport& k = *r.keys;
    j["keys"] = {{"ok", k.ok()},
                 {"matched", k.matched},
                 {"missing_count", k.missing.size()},
                 {"missing", first(k.missing)},
                 {"unexpected_count", k.unexpected.size()},
                 {"unexpected", first(k.unexpected)},
                 {"mismatched_count", k.mismatched.size()},
                 {"mismatched", first(k.mismatched)}};
  } else {
    j["keys"] = nullptr;
  }
  j["error"] = or_null(r.error);
  return j;
}

ordered_json token_json(const SpecialToken& t) { return {{"token", t.token}, {"id", t.id}}; }

/// 859520964 -> "859,520,964".
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListedKeys; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxListedKeys) out += ", and " + std::to_string(items.size() - kMaxListedKeys) + " more";
  return out;
}

std::string fact_text(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& item : v) out += (out.empty() ? "" : ", ") + fact_text(item);
    return "[" + out + "]";
  }
  return v.dump();
}

void component_text(std::ostream& out, const ComponentReport& r) {
  out << "\n" << r.name << ": " << (r.class_name.empty() ? "?" : r.class_name);
  if (!r.library.empty()) out << " (" << r.library << ")";
  out << "\n";
  if (!r.path.empty()) out << "  folder: " << r.path << "\n";
  if (!r.source.empty()) out << "  from: " << r.source << "\n";
  for (const auto& [key, value] : r.config.items()) out << "  " << key << ": " << fact_text(value) << "\n";
  if (!r.files.empty()) {
    out << "  weights: ";
    if (!r.index.empty()) out << fs::path(r.index).filename().string() << " -> ";
    for (size_t i = 0; i < r.files.size(); ++i) out << (i ? ", " : "") << fs::path(r.files[i]).filename().string();
    if (!r.variant.empty()) out << " (variant " << r.variant << ")";
    if (r.fell_back) out << " (no such variant here: the plain weights)";
    out << "\n";
  }
  if (r.parameters || !r.dtypes.empty()) {
    out << "  parameters: " << grouped(static_cast<uint64_t>(r.parameters)) << " in " << grouped(r.bytes) << " bytes:";
    bool first_dtype = true;
    for (const auto& [name, count] : r.dtypes) {
      out << (first_dtype ? " " : ", ") << name << " " << grouped(static_cast<uint64_t>(count.parameters)) << " ("
          << count.tensors << " tensors)";
      first_dtype = false;
    }
    out << "\n";
  }
  if (r.keys) {
    const KeyReport& k = *r.keys;
    if (k.ok()) {
      out << "  keys: all " << k.matched << " match the model\n";
    } else {
      out << "  keys: " << k.matched << " match the model\n";
      if (!k.missing.empty()) out << "    missing: " << k.missing.size() << " (" << listed(k.missing) << ")\n";
      if (!k.unexpected.empty())
        out << "    unexpected: " << k.unexpected.size() << " (" << listed(k.unexpected) << ")\n";
      if (!k.mismatched.empty())
        out << "    of the wrong shape: " << k.mismatched.size() << " (" << listed(k.mismatched) << ")\n";
    }
  }
  if (!r.error.empty()) out << "  error: " << r.error << "\n";
}

std::string token_text(const SpecialToken& t) { return t.token + " (" + std::to_string(t.id) + ")"; }

}  // namespace

SpecialToken TokenizerReport::special(const std::string& role) const {
  for (const SpecialToken& s : special_tokens)
    if (s.role == role) return s;
  return {role, "", 0};
}

const ComponentReport& InspectReport::component(const std::string& name) const {
  for (const ComponentReport& c : models)
    if (c.name == name) return c;
  throw Error("the inspect report has no component '" + name + "'");
}

const TokenizerReport& InspectReport::tokenizer(const std::string& name) const {
  for (const TokenizerReport& t : tokenizers)
    if (t.name == name) return t;
  throw Error("the inspect report has no tokenizer '" + name + "'");
}

InspectReport inspect_model(const std::string& spec, const std::string& variant, const std::string& scheduler,
                            const SingleFileOptions& single_file, const io::LoraSet& loras,
                            const nlohmann::json& scheduler_settings) {
  InspectReport report;
  report.spec = spec;
  report.variant = variant;
  report.scheduler.requested = scheduler;
  ModelDir md;
  // The components' errors are collected, not thrown, so that the other components and
  // the later steps still run; the first is the one resolve_model() alone throws.
  std::vector<ModelDirError> resolve_errors;
  if (!step(report, nullptr, [&] {
        try {
          md = resolve_model(spec, variant, &resolve_errors, single_file);
        } catch (const Error&) {
          // Not served by any family: say what the directory is before the error.
          try {
            ModelIndex index = read_model_index(spec);
            report.root = index.root;
            report.revision = index.revision;
            report.pipeline = index.pipeline_class;
          } catch (const Error&) {
          }
          throw;
        }
      }))
    return report;
  const Family& family = *md.family;
  report.root = md.root;
  report.revision = md.revision;
  report.single_file = md.single_file;
  report.pipeline = string_field(md.model_index, "_class_name", "");
  report.family = family.name;
  report.ignored_components = md.ignored_components;
  report.settings = family.settings;

  // The report's slots, from what resolve_model() read of each component, and the modules the family reads from
  // another's files (Family::derived_components).
  std::vector<const Component*> with_weights;
  for (const Component& c : md.components) {
    if (has_weights(c.role)) with_weights.push_back(&c);
  }
  const std::vector<Component> derived =
      family.derived_components ? family.derived_components(md) : std::vector<Component>{};
  for (const Component& c : derived) with_weights.push_back(&c);
  std::stable_sort(with_weights.begin(), with_weights.end(),
                   [](const Component* a, const Component* b) { return load_rank(a->role) < load_rank(b->role); });
  for (const Component* c : with_weights) {
    ComponentReport r;
    r.name = c->name;
    r.library = c->library;
    r.class_name = c->class_name;
    r.path = c->path;
    report.models.push_back(std::move(r));
  }
  const Component* scheduler_component = nullptr;
  for (const Component& c : md.components) {
    if (c.role == ComponentRole::kTokenizer) {
      TokenizerReport t;
      t.name = c.name;
      t.class_name = c.class_name;
      t.path = c.path;
      report.tokenizers.push_back(std::move(t));
    }
    if (c.role == ComponentRole::kScheduler) scheduler_component = &c;
  }
  if (scheduler_component) {
    report.scheduler.class_name =
        string_field(scheduler_component->config, "_class_name", scheduler_component->class_name);
    report.scheduler.path = scheduler_component->path;
    report.scheduler.settings = scheduler_settings;
    // Into the config before it is read, and checked, as load_text_to_image() does.
    step(report, &report.scheduler.error, [&] { apply_scheduler_settings(md, scheduler, scheduler_settings); });
  }
  auto own_error = [&](const std::string& name) -> std::string* {
    for (ComponentReport& c : report.models)
      if (c.name == name) return &c.error;
    for (TokenizerReport& t : report.tokenizers)
      if (t.name == name) return &t.error;
    if (scheduler_component && scheduler_component->name == name) return &report.scheduler.error;
    return nullptr;
  };
  for (const ModelDirError& e : resolve_errors) {
    std::string* own = own_error(e.component);
    if (!own) report.variant_error = e.message;
    record(report, own, e.message, true);
  }

  // The pipelines' order: the tokenizers, the configs, the scheduler, then each module's
  // weights. A component resolve_model() failed on skips the steps that need what it could
  // not read: its config (not parsed), or its folder.
  for (TokenizerReport& t : report.tokenizers) {
    if (!t.error.empty()) continue;
    step(report, &t.error, [&] {
      const TokenizerClass* kind = find_tokenizer_class(t.class_name);
      if (!kind) throw Error("component '" + t.name + "': dpinfer cannot load a " + t.class_name);
      const std::unique_ptr<Tokenizer> tokenizer = kind->load(t.path);
      t.vocab_size = tokenizer->vocab_size();
      t.model_max_length = tokenizer->model_max_length();
      t.special_tokens = tokenizer->special_tokens();
    });
  }
  std::vector<bool> config_ok(with_weights.size(), false);
  for (size_t i = 0; i < with_weights.size(); ++i) {
    const Component& c = *with_weights[i];
    ComponentReport& r = report.models[i];
    const ModelClass* model_class = find_model_class(c.class_name);
    if (!model_class || !c.config.is_object() || !r.error.empty()) continue;
    config_ok[i] = step(report, &r.error, [&] { r.config = model_class->facts(c.config); });
  }
  const bool configs_ok = std::all_of(config_ok.begin(), config_ok.end(), [](bool ok) { return ok; });
  if (configs_ok && family.default_size)
    step(report, nullptr, [&] { report.default_size = family.default_size(md); });
  // The family's checks across components, as its load runs them before any weights.
  const bool tokenizers_ok = std::all_of(report.tokenizers.begin(), report.tokenizers.end(),
                                         [](const TokenizerReport& t) { return t.error.empty(); });
  if (configs_ok && tokenizers_ok && family.check_components)
    step(report, nullptr, [&] { family.check_components(md); });

  // The scheduler as `dpinfer generate --scheduler` builds it: the same make_scheduler()
  // call, so an unknown name or an unsupported class fails here as it fails there.
  if (scheduler_component) {
    const nlohmann::json& sc = scheduler_component->config;
    report.scheduler.prediction_type = string_field(sc, "prediction_type", "");
    report.scheduler.timestep_spacing = string_field(sc, "timestep_spacing", "");
    if (report.scheduler.error.empty())
      step(report, &report.scheduler.error, [&] {
        report.scheduler.dpinfer_name = make_scheduler(sc, {scheduler, 0.0, family.scheduler_rewrite, family.prediction})->name();
      });
  }

  // The modules built for the key check (on the meta device) are those --lora checks against.
  std::map<std::string, std::shared_ptr<torch::nn::Module>> built;
  for (size_t i = 0; i < with_weights.size(); ++i) {
    const Component& c = *with_weights[i];
    std::shared_ptr<torch::nn::Module>& module = built[c.name];
    if (is_folder(c.path))
      check_weights(report, report.models[i], c, variant, find_model_class(c.class_name), config_ok[i], module);
  }
  if (loras.empty()) return report;
  // LoraPipeline::start_components' facts: the UNet's first layers_per_block for the SGM names, parsed as
  // UNetPipeline parses it (a config that did not parse was reported above; the default stands then).
  LoraModelFacts facts{family.label, 2, family.lora_rules()};
  for (size_t i = 0; i < with_weights.size(); ++i)
    if (with_weights[i]->name == "unet" && config_ok[i])
      facts.layers_per_block = UNetConfig::from_json(with_weights[i]->config).layers_per_block.front();
  std::map<std::string, std::shared_ptr<torch::nn::Module>> lora_components;
  for (const std::string& name : facts.rules.components)
    if (built.count(name)) lora_components[name] = built[name];
  // A GGUF transformer file's blocks: LoraPipeline applies the LoRA unfused there.
  std::set<std::string> unfused;
  for (const Component* c : with_weights)
    if (component_stores_weights(*c)) unfused.insert(c->name);
  for (const io::LoraRef& ref : loras) {
    report.loras.push_back(inspect_lora(ref, facts, lora_components, unfused));
    if (!report.loras.back().error.empty()) record(report, nullptr, report.loras.back().error, true);
  }
  return report;
}

ordered_json InspectReport::to_json() const {
  ordered_json j;
  j["model"] = spec;
  j["variant"] = or_null(variant);
  j["variant_error"] = or_null(variant_error);
  j["path"] = or_null(root);
  j["revision"] = or_null(revision);
  j["pipeline"] = or_null(pipeline);
  j["family"] = or_null(family);
  if (single_file)
    j["single_file"] = {{"path", single_file->path},   {"kind", single_file->kind},
                        {"label", single_file->label}, {"variant", or_null(single_file->variant)},
                        {"base", single_file->base},   {"shipped_base", single_file->shipped_base}};
  else
    j["single_file"] = nullptr;
  j["ok"] = ok();
  j["error"] = or_null(error);
  if (family.empty()) return j;
  if (default_size)
    j["default_size"] = {{"width", (*default_size)[1]}, {"height", (*default_size)[0]}};
  else
    j["default_size"] = nullptr;
  ordered_json settings_json = ordered_json::object();
  for (const SettingSpec& s : settings) settings_json[s.name] = s.default_value;
  j["settings"] = settings_json;
  ordered_json components;
  for (const ComponentReport& c : models) components[c.name] = component_json(c);
  for (const TokenizerReport& t : tokenizers) {
    ordered_json tj = {{"class", t.class_name},
                       {"path", t.path},
                       {"vocab_size", t.vocab_size},
                       {"model_max_length", t.model_max_length}};
    for (const char* role : {"bos", "eos", "pad", "unk"}) tj[role] = token_json(t.special(role));
    tj["error"] = or_null(t.error);
    components[t.name] = tj;
  }
  const SchedulerReport& s = scheduler;
  components["scheduler"] = {{"class", s.class_name},
                             {"path", s.path},
                             {"requested", or_null(s.requested)},
                             {"dpinfer_name", or_null(s.dpinfer_name)},
                             {"prediction_type", or_null(s.prediction_type)},
                             {"timestep_spacing", or_null(s.timestep_spacing)},
                             {"scheduler_settings", s.settings},
                             {"error", or_null(s.error)}};
  j["components"] = components;
  j["ignored_components"] = ignored_components;
  ordered_json loras_json = ordered_json::array();
  for (const LoraReport& l : loras) loras_json.push_back(l.to_json());
  j["loras"] = loras_json;
  return j;
}

std::string InspectReport::memory_text(const std::string& dtype) const {
  const int64_t size = at::elementSize(parse_dtype(dtype));
  // bytes of `r` on the device when `store` says its fp8 layers are stored (1 byte each)
  auto bytes = [&](const ComponentReport& r, bool store) {
    return static_cast<double>(store ? (r.module_elements - r.stored_elements) * size + r.stored_elements
                                     : r.module_elements * size);
  };
  struct Column {
    const char* name;
    bool (*stores)(ComponentRole);
  };
  const Column columns[] = {{"default", [](ComponentRole) { return false; }},
                            {"fp8-denoiser", [](ComponentRole role) { return role == ComponentRole::kDenoiser; }},
                            {"fp8", [](ComponentRole role) {
                               return role == ComponentRole::kDenoiser || role == ComponentRole::kTextEncoder;
                             }}};
  std::ostringstream out;
  out << "weights on the device in " << dtype << ", GB, by --weight-storage (activations come on top):\n";
  out << fmt::format("  {:<48} {:>9} {:>13} {:>9}\n", "", "default", "fp8-denoiser", "fp8");
  double total[3] = {0, 0, 0};
  for (const ComponentReport& r : models) {
    const ModelClass* cls = find_model_class(r.class_name);
    const ComponentRole role = cls ? cls->role : ComponentRole::kVae;
    std::string row = fmt::format("  {:<48}", r.name + " (" + r.class_name + ")");
    for (int i = 0; i < 3; ++i) {
      const double b = bytes(r, columns[i].stores(role));
      total[i] += b;
      row += i == 1 ? fmt::format(" {:>13.2f}", b / 1e9) : fmt::format(" {:>9.2f}", b / 1e9);
    }
    out << row << "\n";
  }
  out << fmt::format("  {:<48} {:>9.2f} {:>13.2f} {:>9.2f}\n", "all", total[0] / 1e9, total[1] / 1e9, total[2] / 1e9);
  return out.str();
}

std::string InspectReport::to_text() const {
  std::ostringstream out;
  out << "model: " << spec << "\n";
  if (root.empty()) return out.str();
  if (family.empty()) return out.str() + "path: " + root + "\npipeline: " + pipeline + "\n";
  out << "path: " << root << "\n";
  if (!revision.empty()) out << "revision: " << revision << "\n";
  out << "pipeline: " << pipeline << "\n";
  if (!family.empty()) out << "family: " << family << "\n";
  if (single_file) {
    out << "single file: " << single_file->path << ", " << single_file->label << "\n";
    if (!single_file->variant.empty()) out << "  detected: " << single_file->variant << "\n";
    out << "  configs from: " << single_file->base
        << (single_file->shipped_base ? " (dpinfer's shipped default; --base to use another)" : " (--base)") << "\n";
  }
  if (!variant.empty()) out << "variant: " << variant << "\n";
  if (!variant_error.empty()) out << "  error: " << variant_error << "\n";
  if (default_size)
    out << "default_size: " << (*default_size)[1] << "x" << (*default_size)[0] << " (width x height)\n";
  if (!settings.empty()) {
    std::string listed_settings;
    for (const SettingSpec& s : settings)
      listed_settings += (listed_settings.empty() ? "" : ", ") + s.name + "=" + s.default_value.dump();
    out << "settings: " << listed_settings << " (the defaults; --set NAME=VALUE)\n";
  }
  if (!ignored_components.empty()) out << "ignored: " << listed(ignored_components) << "\n";
  for (const ComponentReport& c : models) component_text(out, c);

  for (const TokenizerReport& t : tokenizers) {
    out << "\n" << t.name << ": " << (t.class_name.empty() ? "?" : t.class_name) << "\n";
    if (!t.path.empty()) out << "  folder: " << t.path << "\n";
    if (t.error.empty()) {
      out << "  vocab_size: " << t.vocab_size << "\n";
      out << "  model_max_length: " << t.model_max_length << "\n";
      std::string specials;
      for (const SpecialToken& s : t.special_tokens) specials += (specials.empty() ? "" : ", ") + s.role + ": " + token_text(s);
      out << "  " << specials << "\n";
    } else {
      out << "  error: " << t.error << "\n";
    }
  }

  out << "\nscheduler: " << (scheduler.class_name.empty() ? "?" : scheduler.class_name);
  if (!scheduler.dpinfer_name.empty())
    out << " (dpinfer " << scheduler.dpinfer_name << (scheduler.requested.empty() ? "" : ", from --scheduler") << ")";
  else if (!scheduler.requested.empty())
    out << " (--scheduler " << scheduler.requested << ")";
  out << "\n";
  if (!scheduler.path.empty()) out << "  folder: " << scheduler.path << "\n";
  out << "  prediction_type: " << (scheduler.prediction_type.empty() ? "epsilon (not set)" : scheduler.prediction_type)
      << "\n";
  out << "  timestep_spacing: "
      << (scheduler.timestep_spacing.empty() ? "the class default (not set)" : scheduler.timestep_spacing) << "\n";
  for (const auto& [key, value] : scheduler.settings.items())
    out << "  --scheduler-set " << key << "=" << io::json_brief(value) << "\n";
  if (!scheduler.error.empty()) out << "  error: " << scheduler.error << "\n";

  for (const LoraReport& l : loras) l.to_text(out);

  const bool loras_ok = std::all_of(loras.begin(), loras.end(), [](const LoraReport& l) { return l.error.empty(); });
  if (ok())
    out << "\nok: the model loads" << (loras.empty() ? "" : ", with its LoRAs") << "\n";
  else if (!loras_ok && error.rfind("--lora", 0) == 0)
    out << "\nfails: the model loads, but a LoRA does not fit it\n";
  else
    out << "\nfails: the model does not load\n";
  return out.str();
}

}  // namespace dpinfer::pipeline

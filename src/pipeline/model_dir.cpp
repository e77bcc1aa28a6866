#include "dpinfer/pipeline/model_dir.h"

#include <algorithm>
#include <filesystem>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/single_file/single_file.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// What a component's folder must hold, by its role and class.
struct FolderRule {
  std::string config;                     // the file parsed into Component::config
  bool config_optional = false;
  std::vector<std::string> needed_files;  // other files that must be there
};

FolderRule folder_rule(const ComponentSpec& spec, const std::string& class_name) {
  switch (spec.role) {
    case ComponentRole::kScheduler:
      // Its class is checked by the scheduler factory, which knows its list.
      return {"scheduler_config.json", false, {}};
    case ComponentRole::kTokenizer: {
      const TokenizerClass* t = find_tokenizer_class(class_name);
      return {t ? t->config_file : "tokenizer_config.json", true, t ? t->needed_files : std::vector<std::string>{}};
    }
    default:
      return {"config.json", false, {}};
  }
}

std::string brief_value(const json& value) {
  return printable(value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace), 60);
}

/// "a StableDiffusionPipeline needs unet, text_encoder, tokenizer, vae and scheduler".
std::string needed(const Family& family, const std::string& pipeline_class) {
  std::vector<std::string> names;
  for (const ComponentSpec& c : family.components)
    if (!c.optional) names.push_back(c.name);
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return "a " + pipeline_class + " needs " + list;
}

/// Whether model_index.json's `entry` says the component is not there: null or [null, null].
bool is_absent(const json& entry) {
  return entry.is_null() || (entry.is_array() && entry.size() == 2 && entry[0].is_null() && entry[1].is_null());
}

/// Reads one component into `c`, filling what it can (name, then library, class and folder,
/// then config) before it throws, so that a caller collecting errors still has what was
/// found: `dpinfer inspect` reports the rest of a component whose config is broken.
void read_component(const ComponentSpec& spec, const json& entry, const fs::path& root, const fs::path& index_path,
                    const std::string& needs, Component& c) {
  const std::string where = quote(index_path.string());
  if (is_absent(entry)) throw Error(where + " sets '" + spec.name + "' to null; " + needs);
  if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_string())
    throw Error(where + ": component '" + spec.name + "' is " + brief_value(entry) + ", expected [library, class name]");

  const fs::path dir = root / spec.name;
  c.library = entry[0].get<std::string>();
  c.class_name = entry[1].get<std::string>();
  c.path = dir.string();
  if (!spec.classes.empty() && std::find(spec.classes.begin(), spec.classes.end(), c.class_name) == spec.classes.end())
    throw Error(where + ": component '" + c.name + "' is a " + printable(c.class_name, 100) +
                ", which dpinfer does not support; supported: " + join(spec.classes));

  const FolderRule rule = folder_rule(spec, c.class_name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(quote(c.path) + " is missing: model_index.json lists component '" + c.name +
                "' but its folder is not there; download the model again");
  const fs::path config = dir / rule.config;
  if (file_exists(config.string())) {
    c.config = io::read_json_object_file(config.string());
  } else if (rule.config_optional) {
    c.config = json::object();
  } else {
    throw Error(quote(config.string()) + " is missing: component '" + c.name + "' has no config; download the model again");
  }
  for (const std::string& file : rule.needed_files)
    if (!file_exists((dir / file).string()))
      throw Error(quote((dir / file).string()) + " is missing: component '" + c.name +
                  "' needs it; download the model again");
}

}  // namespace

const Component* ModelDir::find(const std::string& component) const {
  for (const Component& c : components)
    if (c.name == component) return &c;
  return nullptr;
}

const Component& ModelDir::at(const std::string& component) const {
  if (const Component* c = find(component)) return *c;
  throw Error(quote(root) + " has no '" + component + "' component");
}

ModelDir resolve_model(const std::string& model_spec, const std::string& variant, std::vector<ModelDirError>* errors,
                       const SingleFileOptions& single_file) {
  std::error_code ec;
  if (fs::is_regular_file(model_spec, ec)) {
    if (!variant.empty())
      throw InputError("--variant " + printable(variant, 60) + " does not apply to the single file " + quote(model_spec) +
                       "; drop it");
    return resolve_single_file(model_spec, single_file, errors);
  }
  if (!single_file.empty())
    throw InputError("--base, --text-encoder, --text-encoder-2 and --vae complete a single-file checkpoint; " +
                     quote(model_spec) + " is not a file, drop them");
  ModelIndex index = read_model_index(model_spec);
  ModelDir model;
  model.spec = index.spec;
  model.name = index.name;
  model.root = index.root;
  model.revision = index.revision;
  model.model_index = std::move(index.json);
  const fs::path root(model.root);
  const fs::path index_path = root / "model_index.json";
  model.family = find_family(index.pipeline_class);
  if (!model.family)
    throw Error(quote(index_path.string()) + ": " + printable(index.pipeline_class, 100) +
                " is not supported yet; supported: " + supported_pipeline_classes());
  const Family& family = *model.family;
  const std::string needs = needed(family, index.pipeline_class);

  const json& entries = model.model_index;
  std::vector<std::string> used;
  for (const ComponentSpec& spec : family.components) {
    used.push_back(spec.name);
    auto it = entries.find(spec.name);
    const bool absent = it == entries.end() || is_absent(*it);
    if (absent && spec.optional) continue;
    Component c;
    c.name = spec.name;
    c.role = spec.role;
    try {
      if (it == entries.end())
        throw Error(quote(index_path.string()) + " has no '" + spec.name + "' component; " + needs);
      read_component(spec, *it, root, index_path, needs, c);
    } catch (const Error& e) {
      if (!errors) throw;
      errors->push_back({spec.name, e.what()});
    }
    model.components.push_back(std::move(c));
  }

  for (const auto& [key, value] : entries.items()) {
    if (key.empty() || key[0] == '_' || std::find(used.begin(), used.end(), key) != used.end()) continue;
    if (!value.is_boolean() && !value.is_null() && !(value.is_array() && value.size() == 2 && value[0].is_null()))
      model.ignored_components.push_back(
          printable(key, 60) + " (" +
          (value.is_array() && value.size() == 2 && value[1].is_string() ? printable(value[1].get<std::string>(), 60)
                                                                          : brief_value(value)) +
          ")");
  }

  if (!variant.empty()) {
    bool any = false;
    std::vector<std::string> with_weights;
    for (const ComponentSpec& spec : family.components) {
      Component* c = nullptr;
      for (Component& x : model.components)
        if (x.name == spec.name) c = &x;
      if (!c || !has_weights(c->role)) continue;
      with_weights.push_back(spec.name);
      // An empty path: the component failed before its folder was known (errors given).
      if (!c->path.empty() && has_weight_variant(c->path, variant)) {
        c->variant = variant;
        any = true;
      }
    }
    if (!any) {
      std::string list;
      for (size_t i = 0; i < with_weights.size(); ++i)
        list += (i == 0 ? "" : i + 1 == with_weights.size() ? " or " : ", ") + with_weights[i];
      const std::string message = quote(model.root) + " has no " + printable(variant, 60) + " weights in " + list +
                                  "; drop --variant " + printable(variant, 60) + " or download the " +
                                  printable(variant, 60) + " files";
      if (!errors) throw Error(message);
      errors->push_back({"", message});
    }
  }
  return model;
}

}  // namespace dpinfer::pipeline

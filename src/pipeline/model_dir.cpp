#include "dpinfer/pipeline/model_dir.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "dpinfer/io/hub_cache.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/weights.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSupportedPipeline = "StableDiffusionPipeline";

struct ComponentRule {
  const char* name;
  const char* config;                     // the file parsed into Component::config
  std::vector<std::string> classes;       // accepted class names; empty: any
  std::vector<std::string> needed_files;  // other files that must be there
  bool config_optional;
  bool has_weights;
};

const std::vector<ComponentRule>& component_rules() {
  static const std::vector<ComponentRule> rules{
      {"unet", "config.json", {"UNet2DConditionModel"}, {}, false, true},
      {"text_encoder", "config.json", {"CLIPTextModel"}, {}, false, true},
      {"tokenizer",
       "tokenizer_config.json",
       {"CLIPTokenizer", "CLIPTokenizerFast"},
       {"vocab.json", "merges.txt"},
       true,
       false},
      {"vae", "config.json", {"AutoencoderKL"}, {}, false, true},
      // The scheduler's class is checked by the scheduler factory, which knows its list.
      {"scheduler", "scheduler_config.json", {}, {}, false, false},
  };
  return rules;
}

std::string brief(const json& value) {
  std::string s = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::vector<std::string> subdirectories(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool is_hub_id(const std::string& id) { return io::is_hub_id(id); }

std::string get_command(const std::string& repo, const std::string& revision) {
  return "`huggingface-cli download " + repo + (revision.empty() ? "" : " --revision " + revision) + "`";
}

/// try_to_load_from_cache's lookup (huggingface_hub/file_download.py): refs/<revision>
/// holds the commit; a revision without a ref is taken as the commit itself.
fs::path find_in_cache(const std::string& spec, std::string* commit_out) {
  const size_t at = spec.rfind('@');
  const std::string repo = at == std::string::npos ? spec : spec.substr(0, at);
  const std::string revision = at == std::string::npos ? "" : spec.substr(at + 1);
  const std::string wanted = revision.empty() ? "main" : revision;
  if (at != std::string::npos &&
      (revision.empty() || fs::path(revision).is_absolute() || revision.find("..") != std::string::npos))
    throw Error("'" + spec + "' has a bad revision after '@'; use org/name@<branch, tag or commit>");

  std::string origin;
  const fs::path cache = hf_hub_cache_dir(&origin);
  const fs::path repo_dir =
      cache / ("models--" + repo.substr(0, repo.find('/')) + "--" + repo.substr(repo.find('/') + 1));
  std::error_code ec;
  const std::string local = fs::absolute(spec, ec).string();
  if (!fs::is_directory(repo_dir, ec))
    throw Error("model '" + spec + "' is neither a directory ('" + local +
                "' does not exist) nor in the hugging face cache ('" + repo_dir.string() +
                "' does not exist; the cache is " + origin +
                ", set HF_HUB_CACHE or HF_HOME to use another); dpinfer never downloads: run " +
                get_command(repo, revision) + " first, or pass the pipeline's directory");

  std::string commit = wanted;
  const fs::path ref = repo_dir / "refs" / wanted;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    commit.erase(commit.find_last_not_of(" \t\r\n") + 1);
    if (commit.empty() || commit.find('/') != std::string::npos ||
        commit.find("..") != std::string::npos)
      throw Error("'" + ref.string() + "' does not hold a commit hash; the cache is damaged, run " +
                  get_command(repo, revision) + " again");
  }
  const fs::path snapshot = repo_dir / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) {
    const std::vector<std::string> cached = subdirectories(repo_dir / "snapshots");
    throw Error("model '" + spec + "' has no snapshot for revision '" + wanted +
                "' in the hugging face cache ('" + snapshot.string() +
                "' does not exist; cached snapshots: " +
                (cached.empty() ? std::string("none") : join(cached)) + "); run " +
                get_command(repo, revision) + ", or pick a cached commit with " + repo + "@<commit>");
  }
  *commit_out = commit;
  return snapshot;
}

/// Reads one component into `c`, filling what it can (name, then library, class and folder,
/// then config) before it throws, so that a caller collecting errors still has what was
/// found: `dpinfer inspect` reports the rest of a component whose config is broken.
void read_component(const ComponentRule& rule, const json& index, const fs::path& root,
                    const fs::path& index_path, Component& c) {
  const std::string where = "'" + index_path.string() + "'";
  const std::string needed =
      "a StableDiffusionPipeline needs unet, text_encoder, tokenizer, vae and scheduler";
  auto it = index.find(rule.name);
  if (it == index.end()) throw Error(where + " has no '" + rule.name + "' component; " + needed);
  const json& entry = *it;
  if (entry.is_null() ||
      (entry.is_array() && entry.size() == 2 && entry[0].is_null() && entry[1].is_null()))
    throw Error(where + " sets '" + rule.name + "' to null; " + needed);
  if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_string())
    throw Error(where + ": component '" + rule.name + "' is " + brief(entry) +
                ", expected [library, class name]");

  const fs::path dir = root / rule.name;
  c.library = entry[0].get<std::string>();
  c.class_name = entry[1].get<std::string>();
  c.path = dir.string();
  if (!rule.classes.empty() &&
      std::find(rule.classes.begin(), rule.classes.end(), c.class_name) == rule.classes.end())
    throw Error(where + ": component '" + c.name + "' is a " + c.class_name +
                ", which dpinfer does not support; supported: " + join(rule.classes));

  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("'" + c.path + "' is missing: model_index.json lists component '" + c.name +
                "' but its folder is not there; download the model again");
  const fs::path config = dir / rule.config;
  if (file_exists(config.string())) {
    c.config = io::read_json_object_file(config.string());
  } else if (rule.config_optional) {
    c.config = json::object();
  } else {
    throw Error("'" + config.string() + "' is missing: component '" + c.name +
                "' has no config; download the model again");
  }
  for (const std::string& file : rule.needed_files)
    if (!file_exists((dir / file).string()))
      throw Error("'" + (dir / file).string() + "' is missing: component '" + c.name +
                  "' needs it; download the model again");
}

}  // namespace

std::string hf_hub_cache_dir(std::string* origin) { return io::hf_hub_cache_dir(origin); }

ModelDir resolve_model(const std::string& spec, const std::string& variant, std::vector<ModelDirError>* errors) {
  if (spec.empty()) throw Error("no model given; pass a pipeline directory or a hub id (org/name)");
  ModelDir model;
  model.spec = spec;
  std::error_code ec;
  fs::path root;
  if (fs::is_directory(spec, ec)) {
    root = fs::absolute(spec, ec).lexically_normal();
    if (!root.has_filename() && root.has_parent_path()) root = root.parent_path();  // "sd/"
    model.name = root.filename().string();
  } else if (fs::exists(spec, ec)) {
    const std::string ext = fs::path(spec).extension().string();
    if (ext == ".safetensors" || ext == ".ckpt")
      throw Error("'" + spec +
                  "' is a single-file checkpoint, which dpinfer does not read; convert it once in "
                  "python with diffusers: from diffusers import StableDiffusionPipeline; "
                  "StableDiffusionPipeline.from_single_file('" +
                  spec + "').save_pretrained('" + fs::path(spec).replace_extension().string() +
                  "', safe_serialization=True)");
    throw Error("'" + spec + "' is a file; pass a diffusers pipeline directory or a hub id (org/name)");
  } else if (is_hub_id(spec.substr(0, spec.rfind('@')))) {
    root = find_in_cache(spec, &model.revision);
    model.name = spec;
  } else {
    throw Error("model '" + spec + "' is neither a directory ('" + fs::absolute(spec, ec).string() +
                "' does not exist) nor a hugging face hub id (org/name or org/name@revision)");
  }
  model.root = root.string();

  const fs::path index_path = root / "model_index.json";
  if (!file_exists(index_path.string())) {
    const bool component = file_exists((root / "config.json").string());
    throw Error("'" + model.root + "' has no model_index.json" +
                (component ? " (it looks like a single component folder)" : "") +
                "; pass the diffusers pipeline directory, the folder holding model_index.json, unet/, "
                "vae/, ...");
  }
  model.model_index = io::read_json_object_file(index_path.string());
  const json& index = model.model_index;
  const std::string where = "'" + index_path.string() + "'";
  auto class_it = index.find("_class_name");
  if (class_it == index.end() || !class_it->is_string())
    throw Error(where + " has no _class_name; it is not a diffusers pipeline, download the model again");
  const std::string pipeline = class_it->get<std::string>();
  if (pipeline != kSupportedPipeline)
    throw Error(where + ": " + pipeline + " is not supported yet; supported: " + kSupportedPipeline);

  std::vector<Component*> slots{&model.unet, &model.text_encoder, &model.tokenizer, &model.vae,
                                &model.scheduler};
  const auto& rules = component_rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    slots[i]->name = rules[i].name;
    try {
      read_component(rules[i], index, root, index_path, *slots[i]);
    } catch (const Error& e) {
      if (!errors) throw;
      errors->push_back({rules[i].name, e.what()});
    }
  }

  for (const auto& [key, value] : index.items()) {
    if (key.empty() || key[0] == '_') continue;
    const bool known =
        std::any_of(rules.begin(), rules.end(), [&](const ComponentRule& r) { return key == r.name; });
    if (!known && !value.is_boolean() && !value.is_null() &&
        !(value.is_array() && value.size() == 2 && value[0].is_null()))
      model.ignored_components.push_back(key + " (" +
                                         (value.is_array() && value.size() == 2 && value[1].is_string()
                                              ? value[1].get<std::string>()
                                              : brief(value)) +
                                         ")");
  }

  if (!variant.empty()) {
    bool any = false;
    for (Component* c : {&model.unet, &model.text_encoder, &model.vae}) {
      // An empty path: the component failed before its folder was known (errors given).
      if (!c->path.empty() && has_weight_variant(c->path, variant)) {
        c->variant = variant;
        any = true;
      }
    }
    if (!any) {
      const std::string message = "'" + model.root + "' has no " + variant +
                                  " weights in unet, text_encoder or vae; drop --variant " + variant +
                                  " or download the " + variant + " files";
      if (!errors) throw Error(message);
      errors->push_back({"", message});
    }
  }
  return model;
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/hub/model_index.h"

#include <filesystem>

#include "dpinfer/io/hub_cache.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

namespace fs = std::filesystem;

ModelIndex read_model_index(const std::string& spec) {
  if (spec.empty()) throw Error("no model given; pass a pipeline directory or a hub id (org/name)");
  ModelIndex model;
  model.spec = spec;
  std::error_code ec;
  fs::path root;
  if (fs::is_directory(spec, ec)) {
    root = fs::absolute(spec, ec).lexically_normal();
    if (!root.has_filename() && root.has_parent_path()) root = root.parent_path();  // "sd/"
    model.name = root.filename().string();
  } else if (fs::exists(spec, ec)) {
    // A single-file --model never gets here (resolve_model() reads it); a --base must be a pipeline.
    throw Error("'" + spec + "' is a file; pass a diffusers pipeline directory or a hub id (org/name)");
  } else if (io::is_hub_id(spec.substr(0, spec.rfind('@')))) {
    root = io::hub_snapshot_dir(spec, "model", &model.revision);
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
  model.json = io::read_json_object_file(index_path.string());
  auto class_it = model.json.find("_class_name");
  if (class_it == model.json.end() || !class_it->is_string())
    throw Error(quote(index_path.string()) +
                " has no _class_name; it is not a diffusers pipeline, download the model again");
  model.pipeline_class = class_it->get<std::string>();
  return model;
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/hub/model_index.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "dpinfer/io/hub_cache.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> subdirectories(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// The command that fills the cache: huggingface_hub's `hf` CLI (huggingface-cli before 1.0).
std::string get_command(const std::string& repo, const std::string& revision) {
  return "`hf download " + repo + (revision.empty() ? "" : " --revision " + revision) + "`";
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
  const fs::path cache = io::hf_hub_cache_dir(&origin);
  const fs::path repo_dir = io::hub_repo_cache_dir(cache.string(), repo);
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

}  // namespace

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
  model.json = io::read_json_object_file(index_path.string());
  auto class_it = model.json.find("_class_name");
  if (class_it == model.json.end() || !class_it->is_string())
    throw Error(quote(index_path.string()) +
                " has no _class_name; it is not a diffusers pipeline, download the model again");
  model.pipeline_class = class_it->get<std::string>();
  return model;
}

}  // namespace dpinfer::pipeline

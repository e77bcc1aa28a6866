#include "dpinfer/pipeline/hub/weight_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::json;

// diffusers' SAFETENSORS_WEIGHTS_NAME first, then transformers' SAFE_WEIGHTS_NAME.
constexpr const char* kWeightPrefixes[] = {"diffusion_pytorch_model", "model"};
constexpr const char* kPickleExtensions[] = {".bin", ".pt", ".pth", ".ckpt", ".pkl"};
constexpr size_t kMaxListedFiles = 10;

struct Candidate {
  std::string name;
  bool index;
};

/// The file names from_pretrained tries, in its order: the index (diffusers' and
/// transformers' _add_variant puts the variant before ".json"), the legacy variant
/// index (_fetch_index_file_legacy), then the single file.
std::vector<Candidate> weight_file_candidates(const std::string& variant) {
  std::vector<Candidate> out;
  for (const char* prefix : kWeightPrefixes) {
    const std::string p = prefix;
    if (variant.empty()) {
      out.push_back({p + ".safetensors.index.json", true});
      out.push_back({p + ".safetensors", false});
    } else {
      out.push_back({p + ".safetensors.index." + variant + ".json", true});
      out.push_back({p + "." + variant + ".safetensors.index.json", true});
      out.push_back({p + "." + variant + ".safetensors", false});
    }
  }
  return out;
}

bool is_pickle(const std::string& name) {
  for (const char* ext : kPickleExtensions)
    if (ends_with(name, ext)) return true;
  return ends_with(name, ".bin.index.json");
}

/// "<prefix>.<variant>…" for a weight prefix, pickled ones included: diffusers'
/// _identify_model_variants test (p.split(".")[1].startswith(variant)), kept to weight files.
bool names_variant(const std::string& name, const std::string& variant) {
  for (const char* prefix : {"diffusion_pytorch_model", "model", "pytorch_model"})
    if (starts_with(name, std::string(prefix) + "." + variant)) return true;
  return ends_with(name, ".index." + variant + ".json");
}

/// Regular files (links followed) in `dir`, sorted by name.
std::vector<std::string> list_files(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string conversion_hint(const fs::path& component_dir) {
  const fs::path pipeline_dir = component_dir.parent_path();
  return "convert it once in python with diffusers: from diffusers import DiffusionPipeline; "
         "DiffusionPipeline.from_pretrained('" +
         pipeline_dir.string() + "').save_pretrained('" + pipeline_dir.string() +
         "-safetensors', safe_serialization=True)";
}

std::vector<std::string> read_index(const fs::path& index_path, const fs::path& dir) {
  const std::string where = "'" + index_path.string() + "'";
  const json index = io::read_json_file(index_path.string(), "re-download it");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(where + " has no weight_map object; it is not a safetensors index, re-download it");
  const json& weight_map = index["weight_map"];
  if (weight_map.empty()) throw Error(where + " has an empty weight_map; re-download it");

  std::map<std::string, std::set<std::string>> keys_by_shard;
  for (const auto& [key, shard] : weight_map.items()) {
    if (!shard.is_string())
      throw Error(where + ": weight_map entry '" + key + "' is not a file name; re-download it");
    const std::string name = shard.get<std::string>();
    const fs::path rel(name);
    bool escapes = name.empty() || rel.is_absolute();
    for (const auto& part : rel) escapes = escapes || part == "..";
    if (escapes)
      throw Error(where + ": weight_map puts '" + key + "' in '" + name +
                  "', which is not a file inside '" + dir.string() + "'; the index is corrupt");
    keys_by_shard[name].insert(key);
  }

  std::vector<std::string> files;
  for (const auto& [name, keys] : keys_by_shard) {
    const fs::path shard_path = dir / name;
    if (!file_exists(shard_path.string()))
      throw Error(where + " names shard '" + name + "' but '" + shard_path.string() +
                  "' does not exist; download the missing shard");
    auto shard = io::SafetensorsFile::open(shard_path.string());
    for (const std::string& key : keys)
      if (!shard->find(key))
        throw Error(where + " puts tensor '" + key + "' in '" + name +
                    "' but that shard does not have it; the index and its shards disagree, "
                    "re-download them");
    for (const auto& tensor : shard->tensors())
      if (!keys.count(tensor.name))
        throw Error(where + " does not list tensor '" + tensor.name + "' of shard '" + name +
                    "'; the index and its shards disagree, re-download them");
    files.push_back(shard_path.string());
  }
  return files;
}
}  // namespace

bool has_weight_variant(const std::string& component_dir, const std::string& variant) {
  if (variant.empty()) return false;
  for (const std::string& name : list_files(component_dir))
    if (names_variant(name, variant)) return true;
  return false;
}

WeightFiles find_weight_files(const std::string& component_dir, const std::string& variant) {
  const fs::path dir(component_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("component folder '" + component_dir +
                "' does not exist; the model directory is incomplete, download it again");

  for (const Candidate& candidate : weight_file_candidates(variant)) {
    const fs::path path = dir / candidate.name;
    if (!file_exists(path.string())) continue;
    WeightFiles found;
    found.variant = variant;
    if (candidate.index) {
      found.index = path.string();
      found.files = read_index(path, dir);
    } else {
      found.files = {path.string()};
    }
    return found;
  }

  const std::vector<std::string> present = list_files(dir);
  std::vector<std::string> pickles;
  for (const std::string& name : present)
    if (is_pickle(name) && (variant.empty() || names_variant(name, variant))) pickles.push_back(name);
  if (!pickles.empty())
    throw Error("'" + component_dir + "' has only pickled weights (" + join_limited(pickles, kMaxListedFiles) +
                "); dpinfer reads only safetensors, because loading a pickled .bin, .pt or .ckpt "
                "file can run arbitrary code; " +
                conversion_hint(dir));

  const std::string has = present.empty() ? "the folder is empty" : "it has " + join_limited(present, kMaxListedFiles);
  if (!variant.empty())
    throw Error("'" + component_dir + "' has no " + variant + " weights (looked for " +
                "diffusion_pytorch_model." + variant + ".safetensors, model." + variant +
                ".safetensors and their sharded indexes); " + has + "; drop --variant " + variant +
                " or download the " + variant + " files");
  throw Error("'" + component_dir +
              "' has no safetensors weights (looked for diffusion_pytorch_model.safetensors, "
              "model.safetensors and their .safetensors.index.json); " +
              has + "; download the component again");
}
}  // namespace dpinfer::pipeline

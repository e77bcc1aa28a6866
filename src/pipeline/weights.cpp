#include "dpinfer/pipeline/weights.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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

// diffusers' SAFETENSORS_WEIGHTS_NAME first, then transformers' SAFE_WEIGHTS_NAME.
constexpr const char* kWeightPrefixes[] = {"diffusion_pytorch_model", "model"};
constexpr const char* kPickleExtensions[] = {".bin", ".pt", ".pth", ".ckpt", ".pkl"};
constexpr size_t kMaxListed = 10;

struct Candidate {
  std::string name;
  bool index;
};

/// The file names from_pretrained tries, in its order: the index (diffusers' and
/// transformers' _add_variant puts the variant before ".json"), the legacy variant
/// index (_fetch_index_file_legacy), then the single file.
std::vector<Candidate> candidates(const std::string& variant) {
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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
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

std::optional<at::ScalarType> torch_dtype(io::Dtype dtype) {
  switch (dtype) {
    case io::Dtype::kBool: return at::kBool;
    case io::Dtype::kU8: return at::kByte;
    case io::Dtype::kI8: return at::kChar;
    case io::Dtype::kI16: return at::kShort;
    case io::Dtype::kU16: return at::kUInt16;
    case io::Dtype::kF16: return at::kHalf;
    case io::Dtype::kBF16: return at::kBFloat16;
    case io::Dtype::kI32: return at::kInt;
    case io::Dtype::kU32: return at::kUInt32;
    case io::Dtype::kF32: return at::kFloat;
    case io::Dtype::kF64: return at::kDouble;
    case io::Dtype::kI64: return at::kLong;
    case io::Dtype::kU64: return at::kUInt64;
    case io::Dtype::kC64: return at::kComplexFloat;
    case io::Dtype::kF8E4M3: return at::kFloat8_e4m3fn;
    case io::Dtype::kF8E5M2: return at::kFloat8_e5m2;
    case io::Dtype::kF8E4M3Fnuz: return at::kFloat8_e4m3fnuz;
    case io::Dtype::kF8E5M2Fnuz: return at::kFloat8_e5m2fnuz;
    case io::Dtype::kF8E8M0: return at::kFloat8_e8m0fnu;
    case io::Dtype::kF4:
    case io::Dtype::kF6E2M3:
    case io::Dtype::kF6E3M2: return std::nullopt;
  }
  return std::nullopt;
}

std::string shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_ignored(const std::string& key, const KeyRenames& renames) {
  for (const std::string& pattern : renames.ignored)
    if (key == pattern || ends_with(key, "." + pattern)) return true;
  return false;
}

/// The key `key` loads into: itself when the module has it, else the first rename the
/// module has, else itself (then it is unexpected).
std::string target_key(const std::string& key, const KeyRenames& renames,
                       const std::map<std::string, at::Tensor>& state) {
  if (state.count(key) || renames.modules.empty()) return key;
  const size_t leaf_dot = key.rfind('.');
  if (leaf_dot == std::string::npos) return key;
  const size_t module_dot = key.rfind('.', leaf_dot - 1);
  const size_t module_begin = module_dot == std::string::npos ? 0 : module_dot + 1;
  const std::string module = key.substr(module_begin, leaf_dot - module_begin);
  for (const KeyRename& rename : renames.modules) {
    if (module != rename.from) continue;
    std::string renamed = key.substr(0, module_begin) + rename.to + key.substr(leaf_dot);
    if (state.count(renamed)) return renamed;
  }
  return key;
}

struct Assignment {
  size_t file;
  const io::TensorView* view;
  std::string source_key;
};

/// The outcome of matching open files against a module: what is wrong, and where each
/// module key's values are.
struct Matching {
  KeyReport report;
  std::map<std::string, at::Tensor> state;
  std::map<std::string, Assignment> assigned;
};

Matching match(const torch::nn::Module& module,
               const std::vector<std::shared_ptr<const io::SafetensorsFile>>& opened,
               const std::vector<std::string>& files, const KeyRenames& renames,
               const std::string& component) {
  Matching m;
  std::vector<std::string> order;  // the module's own order, for the missing list
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (item.value().defined() && m.state.emplace(item.key(), item.value()).second)
      order.push_back(item.key());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (item.value().defined() && m.state.emplace(item.key(), item.value()).second)
      order.push_back(item.key());

  for (size_t f = 0; f < opened.size(); ++f) {
    for (const io::TensorView& view : opened[f]->tensors()) {
      if (is_ignored(view.name, renames)) continue;
      const std::string key = target_key(view.name, renames, m.state);
      auto param = m.state.find(key);
      if (param == m.state.end()) {
        m.report.unexpected.push_back(view.name);
        continue;
      }
      auto [it, inserted] = m.assigned.emplace(key, Assignment{f, &view, view.name});
      if (!inserted)
        throw Error("component '" + component + "': '" + key + "' is given twice, as '" +
                    it->second.source_key + "' in '" + files[it->second.file] + "' and as '" +
                    view.name + "' in '" + files[f] +
                    "'; the checkpoint is inconsistent, re-download it");
      if (!torch_dtype(view.dtype))
        throw Error("'" + files[f] + "': tensor '" + view.name + "' is " +
                    std::string(io::dtype_name(view.dtype)) +
                    ", which dpinfer cannot load; use a checkpoint in f32, f16 or bf16");
      if (param->second.sizes() != at::IntArrayRef(view.shape))
        m.report.mismatched.push_back(key + " is " + shape_text(view.shape) + " in the file but " +
                                      shape_text(param->second.sizes()) + " in the model");
      else
        ++m.report.matched;
    }
  }
  for (const std::string& key : order)
    if (!m.assigned.count(key) && !is_ignored(key, renames)) m.report.missing.push_back(key);
  return m;
}

std::vector<std::shared_ptr<const io::SafetensorsFile>> open_all(const std::vector<std::string>& files,
                                                                 const std::string& component) {
  if (files.empty()) throw Error("component '" + component + "': no weight files to load");
  std::vector<std::shared_ptr<const io::SafetensorsFile>> opened;
  for (const std::string& path : files) opened.push_back(io::SafetensorsFile::open(path));
  return opened;
}

}  // namespace

const KeyRenames& vae_key_renames() {
  static const KeyRenames renames{
      {{"query", "to_q"}, {"key", "to_k"}, {"value", "to_v"}, {"proj_attn", "to_out.0"}},
      {},
  };
  return renames;
}

const KeyRenames& clip_text_key_renames() {
  static const KeyRenames renames{{}, {"text_model.embeddings.position_ids"}};
  return renames;
}

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

  for (const Candidate& candidate : candidates(variant)) {
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
    throw Error("'" + component_dir + "' has only pickled weights (" + join_limited(pickles, kMaxListed) +
                "); dpinfer reads only safetensors, because loading a pickled .bin, .pt or .ckpt "
                "file can run arbitrary code; " +
                conversion_hint(dir));

  const std::string has = present.empty() ? "the folder is empty" : "it has " + join_limited(present, kMaxListed);
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

KeyReport match_keys(const torch::nn::Module& module, const std::vector<std::string>& files,
                     const KeyRenames& renames, const std::string& component) {
  return match(module, open_all(files, component), files, renames, component).report;
}

std::string key_mismatch_message(const KeyReport& report, const std::vector<std::string>& files,
                                 const std::string& component) {
  std::vector<std::string> parts;
  if (!report.missing.empty())
    parts.push_back(std::to_string(report.missing.size()) + " missing (" + join_limited(report.missing, kMaxListed) + ")");
  if (!report.unexpected.empty())
    parts.push_back(std::to_string(report.unexpected.size()) + " unexpected (" + join_limited(report.unexpected, kMaxListed) +
                    ")");
  if (!report.mismatched.empty())
    parts.push_back(std::to_string(report.mismatched.size()) + " of the wrong shape (" +
                    join_limited(report.mismatched, kMaxListed) + ")");
  std::string list;
  for (size_t i = 0; i < parts.size(); ++i) list += (i ? ", " : "") + parts[i];
  const std::string where = files.size() == 1
                                ? "'" + files[0] + "'"
                                : std::to_string(files.size()) + " files from '" + files[0] + "' on";
  return "component '" + component + "': the weights in " + where + " do not match the model: " + list +
         "; check that the component's config belongs to these weights, or download them again";
}

void load_weights(torch::nn::Module& module, const std::vector<std::string>& files,
                  const KeyRenames& renames, const std::string& component) {
  std::vector<std::shared_ptr<const io::SafetensorsFile>> opened = open_all(files, component);
  Matching m = match(module, opened, files, renames, component);
  if (!m.report.ok()) throw Error(key_mismatch_message(m.report, files, component));
  std::map<std::string, at::Tensor>& state = m.state;
  const std::map<std::string, Assignment>& assigned = m.assigned;

  at::NoGradGuard no_grad;
  for (size_t f = 0; f < opened.size(); ++f) {
    for (const auto& [key, a] : assigned) {
      if (a.file != f) continue;
      const io::TensorView& view = *a.view;
      if (view.nbytes == 0) continue;
      const at::ScalarType dtype = *torch_dtype(view.dtype);
      const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
      const size_t item = static_cast<size_t>(io::dtype_bits(view.dtype) / 8);
      // The mapping is read-only; from_blob only reads it here. Data that is not aligned to
      // its element size (files not padded as the reference writer pads them) goes through
      // an aligned copy first.
      at::Tensor source;
      if (reinterpret_cast<uintptr_t>(view.data) % item == 0) {
        source = at::from_blob(const_cast<std::byte*>(view.data), view.shape, options);
      } else {
        source = at::empty(view.shape, options);
        std::memcpy(source.data_ptr(), view.data, view.nbytes);
      }
      state.at(key).copy_(source);
    }
    opened[f].reset();  // unmapped as soon as its tensors are copied
  }
}

}  // namespace dpinfer::pipeline

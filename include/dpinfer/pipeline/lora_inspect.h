#pragma once
// `dpinfer inspect MODEL --lora PATH[:SCALE]` and `dpinfer inspect LORA.safetensors`: what a LoRA
// file is and whether it fits a model, from the file's safetensors header and its one-number alpha
// tensors alone (never its factors, never the model's weights). With a model, the layers come from
// the same LoraMerger::plan() that `dpinfer generate --lora` runs before reading the factors, over
// the modules of the components the family lets LoRAs change, built on the meta device: the same
// mapping, alphas and errors. Without one, lora_format.h's description of the names.

#include <cstdint>
#include <memory>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/loading/lora_format.h"
#include "dpinfer/pipeline/loading/lora_keys.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// What a LoRA does to one component of the model.
struct LoraComponentReport {
  std::string name;          ///< "unet"
  int64_t layers = 0;        ///< layers of the file that change one of its modules
  int64_t modules = 0;       ///< its LoRA-able modules (Linear and Conv2d weights)
  int64_t min_rank = 0, max_rank = 0;
  /// PEFT's scaling as diffusers builds it: "alpha = rank (scale 1)", "alpha 8 (scale 0.5)",
  /// "alphas 1-8 (scale 0.25-2)", "alpha / rank in the factors (...)".
  std::string scaling;
  /// Its weights are stored (a GGUF transformer file), so the LoRA is applied unfused beside them (loading/lora.h).
  bool unfused = false;
};

/// One --lora of `dpinfer inspect MODEL`.
struct LoraReport {
  std::string given;  ///< as given, without the scale
  double scale = 1.0;
  std::string path;    ///< the file io::find_lora_file() resolved, or empty when it failed
  std::string format;  ///< lora_format() under the family's rules
  std::vector<LoraComponentReport> components;  ///< the family's LoRA components, in its order
  bool has_alphas = false;
  bool has_adapter_metadata = false;
  std::vector<std::string> ignored;  ///< what --lora drops with a warning
  std::string error;                 ///< the error `dpinfer generate --lora` would stop with, or empty
  /// With an error, for a file whose header reads: the spelling the family reads nearest to the file's keys and
  /// how they differ from it (lora_nearest_spelling.h); else empty.
  std::string nearest_spelling, nearest_differs;

  nlohmann::ordered_json to_json() const;
  void to_text(std::ostream& out) const;
};

/// Checks `ref` against the modules a family's pipeline would register: `components` maps each
/// of the family's LoRA components (LoraKeyRules::components) to its module built on the meta
/// device (null when it could not be built: the report then says so). `unfused`: the components whose weights
/// are stored (component_stores_weights()), on which the LoRA is applied unfused. Never throws.
LoraReport inspect_lora(const io::LoraRef& ref, const LoraModelFacts& facts,
                        const std::map<std::string, std::shared_ptr<torch::nn::Module>>& components,
                        const std::set<std::string>& unfused = {});

/// `dpinfer inspect LORA.safetensors`: what the file's names and shapes tell without a model.
struct LoraFileReport {
  std::string path;
  LoraNameFacts names;
  bool has_adapter_metadata = false;
  int64_t tensors = 0;

  nlohmann::ordered_json to_json() const;
  std::string to_text() const;
};

/// describe_lora_file(path) when the safetensors file at `path` holds a LoRA (a key of kohya's, PEFT's
/// or LyCORIS' factors); nullopt for anything else, a file that cannot be read included.
std::optional<LoraFileReport> lora_file_report(const std::string& path);

/// Describes the LoRA file at `path`. Throws InputError naming it when its header cannot be read.
LoraFileReport describe_lora_file(const std::string& path);

}  // namespace dpinfer::pipeline

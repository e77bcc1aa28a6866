#pragma once
// The model-class table: each diffusers or transformers class dpinfer can build, keyed by
// the class name model_index.json gives, with how to build it from its config, how its
// checkpoint keys map onto it, and the facts `dpinfer inspect` shows about it. A new model
// class is one row here plus its own files under models/.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "dpinfer/pipeline/component_role.h"
#include "dpinfer/pipeline/loading/weights.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// One buildable class.
struct ModelClass {
  std::string class_name;  ///< "CLIPTextModel", as model_index.json and config.json name it
  std::string library;     ///< "transformers" or "diffusers"
  ComponentRole role;
  /// Parses `config` (the component's config.json), throwing dpinfer::Error naming the field
  /// for a value dpinfer does not implement, and builds the module with its parameters
  /// allocated uninitialised with `options`: on the meta device (names and shapes only, no
  /// memory), or in the run dtype on the target device, ready for load_weights().
  std::shared_ptr<torch::nn::Module> (*build)(const nlohmann::json& config, const at::TensorOptions& options);
  /// The parsed config's key facts, for `dpinfer inspect`. Throws as build() does.
  nlohmann::ordered_json (*facts)(const nlohmann::json& config);
  /// How its checkpoints' keys map onto the module's names.
  KeyRenames renames;
  /// The names layerwise casting (--weight-storage fp8) leaves in the run dtype beyond diffusers'
  /// defaults (loading/layerwise_storage.h): a diffusers class's _skip_layerwise_casting_patterns
  /// and _keep_in_fp32_modules, a transformers class's _keep_in_fp32_modules (T5's "wo", which
  /// transformers' T5 forward reads the dtype of to cast its input: stored in float8, the
  /// activations would be rounded to float8 too).
  std::vector<std::string> layerwise_casting_skip = {};
};

/// Every class dpinfer builds.
const std::vector<ModelClass>& model_classes();
/// The row of `class_name`, or nullptr.
const ModelClass* find_model_class(const std::string& class_name);

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/loading/component_loading.h"

#include <torch/nn/module.h>

#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {

at::ScalarType parse_dtype(const std::string& d) {
  if (d == "fp32") return at::kFloat;
  if (d == "fp16") return at::kHalf;
  if (d == "bf16") return at::kBFloat16;
  throw InputError("dtype: expected fp32, fp16 or bf16, got '" + d + "'");
}

std::shared_ptr<torch::nn::Module> load_component(const Component& c, const at::TensorOptions& options,
                                                  const LoadOptions& load_options) {
  const ModelClass* model_class = find_model_class(c.class_name);
  if (!model_class) throw Error("component '" + c.name + "': dpinfer cannot build a " + c.class_name);
  const std::vector<std::string> files = find_weight_files(c.path, c.variant).files;
  {
    // Names and shapes only: the strict key check runs before a byte is allocated.
    std::shared_ptr<torch::nn::Module> shape = model_class->build(c.config, options.device(at::kMeta));
    const KeyReport report = match_keys(*shape, files, model_class->renames, c.name);
    if (!report.ok()) throw Error(key_mismatch_message(report, files, c.name));
  }
  std::shared_ptr<torch::nn::Module> module = model_class->build(c.config, options);
  load_weights(*module, files, model_class->renames, c.name, load_options);
  module->eval();
  log::debug("{}: {} loaded from {} file(s) as {} on {}", c.name, c.class_name, files.size(),
             c10::toString(options.dtype().toScalarType()), options.device().str());
  return module;
}

}  // namespace dpinfer::pipeline

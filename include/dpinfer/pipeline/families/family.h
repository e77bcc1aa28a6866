#pragma once
// The family table of the torch side: each row of family_specs() (families/family_spec.h: the facts, free of
// LibTorch) with the functions that read its models and build its pipelines. A new family is one row in
// family_specs.cpp, one in families.cpp and its own file in families/; FamilyTable.EveryRowHasEveryPart fails for
// a row that lacks a part.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpinfer/pipeline/families/family_spec.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

struct Component;
struct ModelDir;
struct LoadRequest;

struct Family : FamilySpec {
  /// diffusers' own edits of the scheduler config in this pipeline's __init__, if any.
  SchedulerConfigRewrite scheduler_rewrite = nullptr;
  /// The default image size {height, width}, from the components' configs. Throws
  /// dpinfer::Error when a config it reads is bad.
  std::array<int64_t, 2> (*default_size)(const ModelDir& model) = nullptr;
  /// Builds the pipeline from a resolved directory. Throws InputError for a model it cannot
  /// use, Error otherwise.
  std::unique_ptr<TextToImage> (*load)(const ModelDir& model, const LoadRequest& request, const Family& family) =
      nullptr;
  /// Throws InputError, one line, when the components' configs and tokenizers do not fit one
  /// another (a caption width that is not the text encoder's), reading no weights: what `load`
  /// refuses first, which inspect reports too. Null: the family checks nothing across components.
  void (*check_components)(const ModelDir& model) = nullptr;
  /// Modules the family reads from another component's files under a model class of its own (Qwen-Image-Edit's
  /// vision tower, from the text_encoder folder's visual.* keys), as its load reads them: inspect checks their keys
  /// and the memory plan counts them. Null: none.
  std::vector<Component> (*derived_components)(const ModelDir& model) = nullptr;
};

/// Every family dpinfer runs: family_specs(), in its order, each with its functions. Throws dpinfer::Error (an
/// internal error) when a spec row has no functions' row or a functions' row no spec.
const std::vector<Family>& families();

/// The family that serves `pipeline_class`, or nullptr.
const Family* find_family(const std::string& pipeline_class);

}  // namespace dpinfer::pipeline

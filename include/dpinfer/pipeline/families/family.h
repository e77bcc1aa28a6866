#pragma once
// The family table of the torch side: each row of family_specs() (families/family_spec.h: the facts, free of
// LibTorch) with the functions that read its models and build its pipelines. A new family is one row in
// family_specs.cpp, one in families.cpp and its own file in families/; FamilyTable.EveryRowHasEveryPart fails for
// a row that lacks a part.

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/pipeline/families/family_spec.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

struct Component;
struct ModelDir;
struct LoadRequest;

/// What a pipeline class does with an item's images when they are references to edit (FLUX.1 Kontext, FLUX.2,
/// Qwen-Image-Edit), not img2img's start: the PipelineInfo flags pipeline_info() sets from them, the memory plan's
/// bound, and the inputs of the README's model table.
struct ReferenceFacts {
  bool references = false;       ///< the class's images are references (PipelineInfo::image_is_reference)
  int64_t max_pixels = 0;        ///< the most pixels one may have after the pipeline's own resize (the plan's bound)
  bool sets_item_size = false;   ///< a reference sizes an item that sets no size (PipelineInfo::size_from_reference)
  bool sized_by_last = false;    ///< ... the last reference, not the first (PipelineInfo::size_from_last_reference)
  bool several = false;          ///< an item may list several (PipelineInfo::several_references)
  bool required = false;         ///< every item needs one (PipelineInfo::requires_image)
  bool prompt_reads = false;     ///< the prompt's encoding reads them (PipelineInfo::prompt_reads_image)
};

struct Family;

/// What the torch side adds to a spec row: the functions that read a family's models and build its pipelines
/// (families.cpp, by the row's name).
struct FamilyFunctions {
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
  /// The references of `pipeline_class`, one of the row's, under the run's `settings`, for an item of `item_pixels`
  /// (FLUX.1 Kontext without auto_resize keeps a reference's size, bounded by the item's). Null: the family's classes
  /// take no references (their images start img2img).
  ReferenceFacts (*reference_facts)(const std::string& pipeline_class, const nlohmann::json& settings,
                                    int64_t item_pixels) = nullptr;
};

struct Family : FamilySpec, FamilyFunctions {};

/// Every family dpinfer runs: family_specs(), in its order, each with its functions. Throws dpinfer::Error (an
/// internal error) when a spec row has no functions' row or a functions' row no spec.
const std::vector<Family>& families();

/// The family that serves `pipeline_class`, or nullptr.
const Family* find_family(const std::string& pipeline_class);

/// The references of `pipeline_class` as its family row says (Family::reference_facts); none for a class no row
/// serves or whose row takes no references.
ReferenceFacts class_reference_facts(const std::string& pipeline_class,
                                     const nlohmann::json& settings = nlohmann::json::object(), int64_t item_pixels = 0);

}  // namespace dpinfer::pipeline

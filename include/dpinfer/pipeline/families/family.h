#pragma once
// The family table: one row per kind of pipeline dpinfer runs, dispatched on
// model_index.json's _class_name. A row says which pipeline classes it serves, which
// components they have (and which classes each accepts), the family's settings with
// their defaults, its default steps, guidance and size multiple, its LoRA rules and how to load
// it. A new family is one row in families.cpp plus its own file in families/;
// FamilyTable.EveryRowHasEveryPart fails for a row that lacks a part.

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/settings.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

struct Component;
struct ModelDir;
struct LoadRequest;

/// One component a family's pipelines have, as model_index.json names it.
struct ComponentSpec {
  std::string name;                  ///< "text_encoder_2"
  ComponentRole role;
  std::vector<std::string> classes;  ///< the classes accepted; a scheduler's class is the scheduler table's to check
  bool optional = false;             ///< may be absent, or null in model_index.json
};

struct Family {
  std::string name;                          ///< "stable-diffusion-xl", as records and run.json name it
  std::string label;                         ///< "Stable Diffusion XL", for people
  std::vector<std::string> pipeline_classes; ///< model_index.json _class_names it serves
  std::vector<ComponentSpec> components;     ///< in the order they load (and inspect reports them)
  std::vector<SettingSpec> settings;
  int default_steps = 50;
  double default_guidance_scale = 7.5;
  int size_multiple = 8;
  /// diffusers' own edits of the scheduler config in this pipeline's __init__, if any.
  SchedulerConfigRewrite scheduler_rewrite = nullptr;
  /// What the denoiser predicts: which schedulers --scheduler may name.
  Prediction prediction = Prediction::kNoise;
  /// The default image size {height, width}, from the components' configs. Throws
  /// dpinfer::Error when a config it reads is bad.
  std::array<int64_t, 2> (*default_size)(const ModelDir& model) = nullptr;
  /// Builds the pipeline from a resolved directory. Throws InputError for a model it cannot
  /// use, Error otherwise.
  std::unique_ptr<TextToImage> (*load)(const ModelDir& model, const LoadRequest& request, const Family& family);
  /// How its LoRA files may name their layers, and which components they change (loading/lora_keys.h: the
  /// family's diffusers LoRA loader).
  LoraKeyRules (*lora_rules)() = nullptr;
  /// Throws InputError, one line, when the components' configs and tokenizers do not fit one
  /// another (a caption width that is not the text encoder's), reading no weights: what `load`
  /// refuses first, which inspect reports too. Null: the family checks nothing across components.
  void (*check_components)(const ModelDir& model) = nullptr;
  /// img2img (issue 29): the strength of an item with an input image that sets none, as the
  /// family's diffusers img2img pipeline defaults it; 0 when the family takes no input image.
  double default_strength = 0;
  /// Inpainting: the strength of an item with a mask that sets none; 0 when the family takes no mask.
  double default_inpaint_strength = 0;
  /// Every pipeline class of the family takes an item's image as a reference to edit (FLUX.2 [klein]), not as
  /// img2img's start (PipelineInfo::image_is_reference). FLUX.1's Kontext class sets that itself.
  bool image_is_reference = false;
  /// With image_is_reference: an item may list several references (`image` as a list), as the family's pipelines
  /// take a list of images (FLUX.2's prepare_image_latents), each with its own position ids.
  bool several_references = false;
  /// Modules the family reads from another component's files under a model class of its own (Qwen-Image-Edit's
  /// vision tower, from the text_encoder folder's visual.* keys), as its load reads them: inspect checks their keys
  /// and the memory plan counts them. Null: none.
  std::vector<Component> (*derived_components)(const ModelDir& model) = nullptr;
};

/// Every family dpinfer runs.
const std::vector<Family>& families();

/// The family that serves `pipeline_class`, or nullptr.
const Family* find_family(const std::string& pipeline_class);

/// Every pipeline class any family serves, comma-separated, for messages.
std::string supported_pipeline_classes();

}  // namespace dpinfer::pipeline

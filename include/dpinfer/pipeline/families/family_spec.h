#pragma once
// The family rows' facts, free of LibTorch: one row per kind of pipeline dpinfer runs, dispatched on
// model_index.json's _class_name. A row says which pipeline classes it serves, which components they have (and
// which classes each accepts), the family's settings with their defaults, its default steps, guidance, strengths
// and size multiple, what its denoiser predicts, and its LoRA rules. The torch-free layers read these rows (the
// generate options' help, pipeline/family_table.h); the torch side adds each row's load functions
// (families/family.h). A new family is one row in family_specs.cpp, one in families.cpp and its own files in
// families/; FamilyTable.EveryRowHasEveryPart fails for a row that lacks a part.

#include <functional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/component_role.h"
#include "dpinfer/pipeline/loading/lora_keys.h"
#include "dpinfer/pipeline/schedulers/prediction.h"
#include "dpinfer/pipeline/settings.h"

namespace dpinfer::pipeline {

/// One component a family's pipelines have, as model_index.json names it.
struct ComponentSpec {
  std::string name;                  ///< "text_encoder_2"
  ComponentRole role;
  std::vector<std::string> classes;  ///< the classes accepted; a scheduler's class is the scheduler table's to check
  bool optional = false;             ///< may be absent, or null in model_index.json
};

struct FamilySpec {
  std::string name;                          ///< "stable-diffusion-xl", as records and run.json name it
  std::string label;                         ///< "Stable Diffusion XL", for people
  std::vector<std::string> pipeline_classes; ///< model_index.json _class_names it serves
  std::vector<ComponentSpec> components;     ///< in the order they load (and inspect reports them)
  std::vector<SettingSpec> settings;
  int default_steps = 50;
  double default_guidance_scale = 7.5;
  int size_multiple = 8;
  /// What the denoiser predicts: which schedulers --scheduler may name.
  Prediction prediction = Prediction::kNoise;
  /// How its LoRA files may name their layers, and which components they change (loading/lora_keys.h: the
  /// family's diffusers LoRA loader).
  LoraKeyRules (*lora_rules)() = nullptr;
  /// img2img (issue 29): the strength of an item with an input image that sets none, as the
  /// family's diffusers img2img pipeline defaults it; 0 when the family takes no input image.
  double default_strength = 0;
  /// Inpainting: the strength of an item with a mask that sets none; 0 when the family takes no mask. (A class whose
  /// images are references to edit takes neither: Family::reference_facts.)
  double default_inpaint_strength = 0;
  /// --cuda-graphs (issue 28, nn/cuda_graphs.h): the family's denoising loop runs its denoiser calls through CUDA
  /// graphs when asked; load_text_to_image refuses the option for a row without it.
  bool cuda_graphs = false;
};

/// Every family's facts, in the order inspect and the README list them.
const std::vector<FamilySpec>& family_specs();

/// The row that serves `pipeline_class`, or nullptr.
const FamilySpec* find_family_spec(const std::string& pipeline_class);

/// Every pipeline class any family serves, comma-separated, for messages.
std::string supported_pipeline_classes();

/// The labels of the rows `which` holds for, in row order, as a sentence lists them: "A", "A and B", "A, B and C";
/// "" for none.
std::string family_labels(const std::function<bool(const FamilySpec&)>& which);

/// One fact of every row for a help text, grouped by value in row order: "50 for Stable Diffusion, Qwen-Image; 28
/// for FLUX.1". `value` gives a row's value as it reads; a row whose value is empty is left out.
std::string values_by_family(const std::function<std::string(const FamilySpec&)>& value);

}  // namespace dpinfer::pipeline

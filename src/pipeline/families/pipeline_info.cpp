#include "pipeline_info.h"

#include <algorithm>

#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"

namespace dpinfer::pipeline {

PipelineInfo pipeline_info(const ModelDir& model, const LoadRequest& request, const Family& family,
                           const std::string& scheduler_name, const nlohmann::json& settings,
                           std::array<int64_t, 2> default_size) {
  PipelineInfo info;
  info.family = family.name;
  info.family_label = family.label;
  info.pipeline_class = model.model_index.value("_class_name", std::string());
  info.model_name = model.name;
  info.model_path = model.root;
  info.model_revision = model.revision;
  if (model.single_file) {
    const SingleFileInfo& sf = *model.single_file;
    info.model_path = sf.path;
    nlohmann::json components = nlohmann::json::object();
    for (const Component& c : model.components) components[c.name] = c.source;
    info.single_file = {{"kind", sf.kind},       {"label", sf.label},          {"variant", sf.variant},
                        {"base", sf.base},       {"shipped_base", sf.shipped_base}, {"components", components}};
  }
  info.scheduler_name = scheduler_name;
  info.sampler_label = a1111_sampler_name(scheduler_name);
  info.scheduler_settings = request.scheduler_settings;
  info.device = request.device;
  info.dtype = request.dtype;
  if (request.weight_storage != "default") info.weight_storage = request.weight_storage;
  info.vae_tiling = request.vae_tiling;
  if (request.attention_backend != "auto") info.attention_backend = request.attention_backend;
  info.channels_last = request.channels_last;
  if (request.fp8_compute != "off") info.fp8_compute = request.fp8_compute;
  info.cuda_graphs = request.cuda_graphs;
  if (model.single_file && !model.single_file->weight_storage.empty())
    info.weight_storage = model.single_file->weight_storage;  // a GGUF file (load.cpp refuses it with fp8)
  info.setting_specs = family.settings;
  info.settings = settings;
  info.default_height = static_cast<int>(default_size[0]);
  info.default_width = static_cast<int>(default_size[1]);
  info.default_steps = family.default_steps;
  info.default_guidance_scale = family.default_guidance_scale;
  info.size_multiple = family.size_multiple;
  info.default_strength = family.default_strength;
  info.default_inpaint_strength = family.default_inpaint_strength;
  // A class whose images are references to edit (its row's reference_facts) takes no strength and no mask.
  if (family.reference_facts != nullptr) {
    const ReferenceFacts refs = family.reference_facts(info.pipeline_class, settings, 0);
    if (refs.references) {
      info.image_is_reference = true;
      info.size_from_reference = refs.sets_item_size;
      info.size_from_last_reference = refs.sized_by_last;
      info.several_references = refs.several;
      info.requires_image = refs.required;
      info.prompt_reads_image = refs.prompt_reads;
      info.default_strength = 0;
      info.default_inpaint_strength = 0;
    }
  }
  info.ignored_components = model.ignored_components;
  // The files of `Model hash` (worker/model_hashes.h): a single-file checkpoint itself, else
  // the denoiser's weight files, as this run loads them.
  if (model.single_file) {
    info.hash_files = {model.single_file->path};
  } else {
    for (const Component& c : model.components)
      if (c.role == ComponentRole::kDenoiser) {
        info.hash_files = find_weight_files(c.path, c.variant).files;
        std::sort(info.hash_files.begin(), info.hash_files.end());
        break;
      }
  }
  return info;
}

}  // namespace dpinfer::pipeline

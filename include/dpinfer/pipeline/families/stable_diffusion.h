#pragma once
// The Stable Diffusion 1.x/2.x family: diffusers' StableDiffusionPipeline.

#include <memory>
#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// StableDiffusionPipeline.__init__'s rewrite of old scheduler configs: steps_offset 1 and
/// clip_sample false, on the config's own class always (diffusers checks the loaded values,
/// class defaults included), on another class only where the file has the key (from_config
/// drops the rest).
void stable_diffusion_scheduler_rewrite(nlohmann::json& keys, bool own_class);

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_stable_diffusion(const ModelDir& model, const LoadRequest& request,
                                                   const Family& family);

}  // namespace dpinfer::pipeline

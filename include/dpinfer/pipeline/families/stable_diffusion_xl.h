#pragma once
// The SDXL family: diffusers' StableDiffusionXLPipeline (SDXL base and its fine-tunes,
// SDXL-Turbo and other distilled variants, which differ only in their configs).

#include <memory>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// The family's load function (families.cpp).
std::unique_ptr<TextToImage> load_stable_diffusion_xl(const ModelDir& model, const LoadRequest& request,
                                                      const Family& family);

}  // namespace dpinfer::pipeline

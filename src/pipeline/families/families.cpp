#include "dpinfer/pipeline/families/family.h"

#include <algorithm>
#include <utility>

#include "dpinfer/pipeline/families/chroma.h"
#include "dpinfer/pipeline/families/flux.h"
#include "dpinfer/pipeline/families/flux2.h"
#include "dpinfer/pipeline/families/qwen_image.h"
#include "dpinfer/pipeline/families/stable_diffusion.h"
#include "dpinfer/pipeline/families/stable_diffusion_3.h"
#include "dpinfer/pipeline/families/stable_diffusion_xl.h"
#include "dpinfer/pipeline/families/z_image.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

/// The UNet families' default size: unet sample_size (`fallback` latents when the config has
/// none) times the VAE's scale factor, {height, width}. StableDiffusionXLPipeline refuses a
/// list sample_size; dpinfer reads it as [height, width], as StableDiffusionPipeline does.
template <int64_t kFallback>
std::array<int64_t, 2> unet_default_size(const ModelDir& model) {
  const UNetConfig unet = UNetConfig::from_json(model.at("unet").config);
  const int64_t factor = AutoencoderKLConfig::from_json(model.at("vae").config).scale_factor();
  const auto sample = unet.sample_size.value_or(std::array<int64_t, 2>{kFallback, kFallback});
  return {sample[0] * factor, sample[1] * factor};
}

/// Each family's functions, by its spec row's name (family_specs.cpp).
const std::vector<std::pair<std::string, FamilyFunctions>>& family_functions() {
  // One row per family spec: its scheduler rewrite, default size, load, check, derived components and references.
  static const std::vector<std::pair<std::string, FamilyFunctions>> table{
      {"stable-diffusion",
       {
           stable_diffusion_scheduler_rewrite,
           unet_default_size<64>,
           load_stable_diffusion,
           /*check_components=*/nullptr,
       }},
      {"stable-diffusion-xl",
       {
           /*scheduler_rewrite=*/nullptr,
           unet_default_size<128>,
           load_stable_diffusion_xl,
           /*check_components=*/nullptr,
       }},
      {"qwen-image",
       {
           /*scheduler_rewrite=*/nullptr,
           qwen_image_default_size,
           load_qwen_image,
           check_qwen_image_components,
           qwen_image_derived_components,     // the Edit classes' vision tower
           qwen_image_reference_facts,        // the Edit classes' references
       }},
      {"z-image",
       {
           /*scheduler_rewrite=*/nullptr,
           z_image_default_size,
           load_z_image,
           check_z_image_components,
       }},
      {"flux",
       {
           /*scheduler_rewrite=*/nullptr,
           flux_default_size,
           load_flux,
           check_flux_components,
           /*derived_components=*/nullptr,
           flux_reference_facts,  // Kontext's reference
       }},
      {"chroma",
       {
           /*scheduler_rewrite=*/nullptr,
           flux_default_size,
           load_chroma,
           check_chroma_components,
       }},
      {"flux2",
       {
           /*scheduler_rewrite=*/nullptr,
           flux2_default_size,
           load_flux2,
           check_flux2_components,
           /*derived_components=*/nullptr,
           flux2_reference_facts,
       }},
      {"flux2-dev",
       {
           /*scheduler_rewrite=*/nullptr,
           flux2_default_size,
           load_flux2,
           check_flux2_components,
           /*derived_components=*/nullptr,
           flux2_reference_facts,
       }},
      {"stable-diffusion-3",
       {
           /*scheduler_rewrite=*/nullptr,
           stable_diffusion_3_default_size,
           load_stable_diffusion_3,
           check_stable_diffusion_3_components,
       }},
  };
  return table;
}

std::vector<Family> join_specs_and_functions() {
  std::vector<Family> rows;
  for (const FamilySpec& spec : family_specs()) {
    const auto& fns = family_functions();
    const auto it = std::find_if(fns.begin(), fns.end(), [&](const auto& f) { return f.first == spec.name; });
    if (it == fns.end()) throw Error("family '" + spec.name + "' has no functions' row in families.cpp");
    Family row;
    static_cast<FamilySpec&>(row) = spec;
    static_cast<FamilyFunctions&>(row) = it->second;
    rows.push_back(std::move(row));
  }
  for (const auto& [name, functions] : family_functions())
    if (std::none_of(family_specs().begin(), family_specs().end(), [&](const FamilySpec& s) { return s.name == name; }))
      throw Error("families.cpp has functions for '" + name + "', which family_specs.cpp has no row of");
  return rows;
}

}  // namespace

const std::vector<Family>& families() {
  static const std::vector<Family> table = join_specs_and_functions();
  return table;
}

const Family* find_family(const std::string& pipeline_class) {
  for (const Family& f : families())
    for (const std::string& c : f.pipeline_classes)
      if (c == pipeline_class) return &f;
  return nullptr;
}

ReferenceFacts class_reference_facts(const std::string& pipeline_class, const nlohmann::json& settings,
                                     int64_t item_pixels) {
  const Family* family = find_family(pipeline_class);
  if (family == nullptr || family->reference_facts == nullptr) return {};
  return family->reference_facts(pipeline_class, settings, item_pixels);
}

}  // namespace dpinfer::pipeline

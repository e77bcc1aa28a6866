#pragma once
// StableDiffusionPipeline (diffusers' pipeline_stable_diffusion.py __call__) in
// LibTorch: CLIP tokenizer + text encoder, UNet2DConditionModel, a scheduler and
// the AutoencoderKL decoder, loaded from a diffusers directory or the HF cache.

#include <memory>
#include <string>

#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

struct StableDiffusionOptions {
  std::string model;          ///< directory with model_index.json, or a hub id (org/name)
  std::string variant;        ///< e.g. "fp16"; components without it fall back to the plain weights
  std::string scheduler;      ///< dpinfer name; empty: the one in scheduler_config.json
  std::string dtype = "fp32"; ///< fp32, fp16 or bf16
  std::string device = "cpu"; ///< "cpu" or "cuda:N"
  int clip_skip = 0;
  double guidance_rescale = 0.0;
  double eta = 0.0;           ///< DDIM's eta
};

/// Loads the pipeline. Throws InputError for a model that cannot be used (with the
/// same message `dpinfer inspect` prints), Error otherwise.
std::unique_ptr<TextToImage> load_stable_diffusion(const StableDiffusionOptions& options);

/// AUTOMATIC1111's sampler name for a dpinfer scheduler name ("dpm++2m-karras" ->
/// "DPM++ 2M Karras").
std::string a1111_sampler_name(const std::string& scheduler);

}  // namespace dpinfer::pipeline

#pragma once
// What StableDiffusionPipeline and StableDiffusionXLPipeline share around their text
// encoders: the UNet and VAE configs, the settings and scheduler resolved before any
// weights load, the per-batch prologue (size check, settings, eta, the CFG rule), and the
// denoise-and-decode epilogue. Each family keeps its own encoders and conditioning.

#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "denoising.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
#include "dpinfer/pipeline/text_to_image.h"
#include "lora_pipeline.h"

namespace dpinfer::pipeline {

class UNetPipeline : public LoraPipeline {
 public:
  const PipelineInfo& info() const override { return info_; }
  /// DeepCache's counts over the run (deep_cache.h), when an image ran with it.
  nlohmann::json statistics() const override { return statistics_; }
  /// The settings both families share: DeepCache's branch must be one of this UNet's. The families' overrides
  /// call it.
  void check_settings(const nlohmann::json& settings) const override;

 protected:
  /// Reads the unet and vae configs; loads nothing.
  UNetPipeline(const ModelDir& model, const LoadRequest& request, const Family& family);

  /// Resolves --set against the family's settings, checks them with the derived class's
  /// check_settings() (so call it from the derived constructor, once that can answer), and
  /// builds the scheduler: a bad setting, config or --scheduler costs no weights.
  void resolve_settings_and_scheduler(const ModelDir& model, const LoadRequest& request);

  /// Loads the UNet (load_denoiser: after the text encoders), then the VAE in `vae_dtype` (the model dtype unless the family upcasts
  /// it; the weights are then rounded through the model dtype, as diffusers' upcast does),
  /// and fills info(). Call last in the derived constructor, under InferenceMode.
  void load_unet_and_vae(const ModelDir& model, const LoadRequest& request, at::ScalarType vae_dtype);

  /// One batch's resolved settings and scheduler, after the size and settings checks.
  struct Batch {
    nlohmann::json settings;
    Scheduler* scheduler = nullptr;
    bool cfg = false;  ///< diffusers' do_classifier_free_guidance: g > 1 and no guidance embedding
  };
  Batch begin_batch(const std::vector<ImageRequest>& batch) const;

  /// The initial noise, the denoising loop over `conditioning` (its embeds, added and cfg
  /// filled by the family), and the VAE decode of `to_vae_space(latents)` as 8-bit RGB.
  std::vector<RgbImage> denoise_and_decode(const std::vector<ImageRequest>& batch, const Batch& state,
                                           DenoiseInputs conditioning,
                                           const std::function<at::Tensor(const at::Tensor&)>& to_vae_space);

  /// Runs `encode` with the VAE in the dtype its encoder runs in: float32 under SDXL's force_upcast (the run
  /// dtype's weights, upcast exactly and cast back after), else as loaded.
  void with_vae_encoder(const std::function<void()>& encode);
  /// The scaled latents of an image [1, 3, H, W] float32 in [-1, 1] (channels-last, as vae_input() makes it), as
  /// the SD and SDXL img2img and inpainting pipelines encode one: cast to the run dtype (then to float32 for the
  /// upcast encoder), latent_dist.sample(generator), back to the run dtype, scaled (with latents_mean/std when
  /// the VAE config has them). Call inside with_vae_encoder().
  at::Tensor encode_image(const at::Tensor& image, at::Generator& generator);

  /// Inpainting's start (StableDiffusionInpaintPipeline): sets the scheduler's begin index, fills `state`
  /// and the generators, and returns the initial latents.
  at::Tensor inpaint_start(const std::vector<ImageRequest>& batch, Scheduler& scheduler, bool cfg, InpaintState& state);

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  UNetConfig unet_config_;
  AutoencoderKLConfig vae_config_;
  at::ScalarType vae_dtype_ = at::kFloat;
  /// StableDiffusionXLImg2ImgPipeline.prepare_latents: with the VAE config's force_upcast, the image is
  /// encoded in float32 whatever the run dtype (the VAE's weights upcast for it, then cast back). SDXL sets it.
  bool upcast_vae_encode_ = false;
  std::vector<at::Generator> inpaint_generators_;  ///< the batch's, from inpaint_start()
  std::shared_ptr<UNet2DConditionModelImpl> unet_;
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
  std::shared_ptr<AutoencoderKLImpl> vae_;
  std::unique_ptr<PipelineScheduler> scheduler_;
  PipelineInfo info_;
  nlohmann::json statistics_ = nlohmann::json::object();  ///< statistics(): DeepCache's counts over the run
};

}  // namespace dpinfer::pipeline

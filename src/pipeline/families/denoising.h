#pragma once
// The pieces of a denoising run that the families share: each image's own noise and
// generator, classifier-free guidance with diffusers' rescale, the size check, and the
// conversion of decoded images to 8-bit RGB.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

/// Each image's CPU generator, seeded with its own seed, and the batch's initial noise
/// [B, channels, h, w] drawn from them in `dtype` on the CPU, one row per generator, then
/// moved to `device`: diffusers' randn_tensor with a list of generators, so that an image
/// does not depend on its batch-mates. The schedulers' step noise continues from the same
/// generators.
struct BatchNoise {
  std::vector<at::Generator> generators;
  at::Tensor noise;
};
BatchNoise batch_noise(const std::vector<ImageRequest>& batch, int64_t channels, int64_t h, int64_t w,
                       at::ScalarType dtype, const at::Device& device);

/// A pipeline's scheduler, built from its config and request, and built again when a batch
/// asks for another eta: DDIM's eta is a family setting, so it may change between batches
/// (set_timesteps() resets the rest of a scheduler's state every batch anyway).
class PipelineScheduler {
 public:
  PipelineScheduler(nlohmann::json config, SchedulerRequest request);
  /// The scheduler for a batch with `eta`.
  Scheduler& with_eta(double eta);
  /// The dpinfer name of what it builds.
  std::string name() const { return scheduler_->name(); }

 private:
  nlohmann::json config_;
  SchedulerRequest request_;
  std::unique_ptr<Scheduler> scheduler_;
};

/// What a UNet family's denoising loop needs beyond the model and the scheduler.
struct DenoiseInputs {
  at::Tensor embeds;                          ///< [B or 2B, L, D]: the unconditional half first under CFG
  const AddedConditioning* added = nullptr;   ///< SDXL's text_time conditioning, in the same order
  bool cfg = false;
  double guidance_scale = 1.0;
  double guidance_rescale = 0.0;
  std::function<void()> check_cancelled;      ///< asked before every step
};

/// diffusers' denoising loop of StableDiffusionPipeline and StableDiffusionXLPipeline, from
/// `latents` (the initial noise already scaled by init_noise_sigma) on `device`: per step,
/// the CFG batch, scale_model_input, the UNet, guidance, and the scheduler step drawing any
/// noise from each image's own generator. Returns the final latents.
at::Tensor denoise(UNet2DConditionModelImpl& unet, Scheduler& scheduler, at::Tensor latents,
                   const DenoiseInputs& inputs, std::vector<at::Generator>& generators, const at::Device& device);

/// Classifier-free guidance on a model output [2B, ...] whose first half is the
/// unconditional prediction: uncond + g (text - uncond), then diffusers' rescale_noise_cfg
/// (Lin et al., "Common Diffusion Noise Schedules and Sample Steps are Flawed", §3.4) when
/// `rescale` > 0. Returns [B, ...].
at::Tensor guided(const at::Tensor& model_output, double guidance_scale, double rescale);

/// Throws InputError unless width and height are multiples of `multiple` (the family's)
/// and of the VAE's `scale_factor`.
void check_image_size(int width, int height, int multiple, int64_t scale_factor);

/// VaeImageProcessor.postprocess for images [B, 3, H, W] in about [-1, 1], in the model
/// dtype on any device: (x / 2 + 0.5).clamp(0, 1) in the model dtype, then float32 on the
/// CPU, x255, rounded half to even, uint8. Marks images that held NaN or Inf.
std::vector<RgbImage> to_rgb(const at::Tensor& images);

/// Logs diffusers' warning for a prompt truncated by `dropped` tokens past `max_length`.
void warn_truncated(const std::string& text, bool negative, int64_t dropped, int max_length,
                    const std::string& encoder);

}  // namespace dpinfer::pipeline

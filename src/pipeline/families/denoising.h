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

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
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

/// img2img (issue 29). How a family's diffusers img2img pipeline turns strength into its first step
/// (get_timesteps): the UNet pipelines (SD, SDXL) keep int(steps * strength) steps, the
/// flow-matching ones steps - int(steps - steps * strength), which differ for some products.
enum class StrengthRounding { kIntSteps, kFloatSteps };

/// t_start of get_timesteps: the position of the first step from the image, in
/// [0, steps]. Throws InputError when the strength runs no step.
int64_t img2img_start(int steps, double strength, StrengthRounding rounding);

/// generate() of a batch whose references (PipelineInfo::image_is_reference) may differ in size or number:
/// references of different sizes make token sequences of different lengths, which one transformer call cannot
/// hold, so each list of sizes (and the requests without a reference) runs as its own batch through `one_size`,
/// and the images come back in the batch's order. An image depends on its own request only, so this changes none.
std::vector<RgbImage> generate_by_reference_size(
    const std::vector<ImageRequest>& batch,
    const std::function<std::vector<RgbImage>(const std::vector<ImageRequest>&)>& one_size);

/// A request's references in order (PipelineInfo::image_is_reference): its image, then its more_images; none
/// without an image.
std::vector<const RgbImage*> references_of(const ImageRequest& r);

/// VaeImageProcessor.preprocess of an image already at its size: uint8 to float32 / 255 (numpy's
/// float32 division), then 2x - 1, as [1, 3, H, W] in `dtype` on `device`, channels-last in memory as
/// diffusers' tensor is (a transposed view of the HWC array).
at::Tensor vae_input(const RgbImage& image, at::ScalarType dtype, const at::Device& device);

/// Inpainting's mask as StableDiffusionInpaintPipeline prepares it: VaeImageProcessor with do_binarize
/// and do_convert_grayscale (the grayscale / 255, then 0 below 0.5 and 1 from it), [1, 1, H, W] float32 on
/// the CPU.
at::Tensor binary_mask(const GrayImage& mask);

/// The batch's masks at the latents' size, [B, 1, h, w] float32 on the CPU: each binary_mask()
/// F.interpolate'd (nearest) to h x w, as the inpainting pipelines' prepare_mask_latents do. Throws
/// InputError when a request has no mask.
at::Tensor latent_masks(const std::vector<ImageRequest>& batch, int64_t h, int64_t w);

/// Inpainting with a denoiser that takes no mask (a 4-channel UNet, FLUX.1, a 16-channel SD3): after a
/// step, the kept region (mask 0) is the image latents noised to the level of timesteps()[next], or the
/// image itself after the last step, and the repainted one (mask 1) the step's `latents`.
at::Tensor blend_kept_region(const Scheduler& scheduler, const at::Tensor& latents, const at::Tensor& image_latents,
                             const at::Tensor& noise, const at::Tensor& mask, int64_t next);

/// DiagonalGaussianDistribution.sample(generator): mean + exp(0.5 logvar) * noise, the noise
/// [1, C, h, w] drawn from `generator` on the CPU in the mean's dtype, then moved to its device.
at::Tensor sample_latent(const LatentDist& dist, at::Generator& generator);

/// img2img's start for a batch (the img2img pipelines' prepare_latents with a list of generators):
/// per item, its generator seeded with its seed, its image encoded alone by `encode` (which draws
/// the latent sample from that generator and returns the scaled latents [1, C, h, w]), then its
/// noise of that shape in `dtype` from the same generator. So an item depends on nothing else in
/// its batch. Returns the generators, the image latents [B, ...] and the noise [B, ...] on `device`.
struct ImageStart {
  std::vector<at::Generator> generators;
  at::Tensor image_latents;
  at::Tensor noise;
};
ImageStart image_start(const std::vector<ImageRequest>& batch,
                       const std::function<at::Tensor(const RgbImage& image, at::Generator& generator)>& encode,
                       at::ScalarType dtype, const at::Device& device);

/// What an inpainting run keeps beside the latents (StableDiffusionInpaintPipeline): the mask at the latents'
/// size and the masked image's latents (both [B or 2B, ...], doubled under CFG as the UNet input is), the
/// image latents and the noise, which a 4-channel UNet's run blends back in after every step.
struct InpaintState {
  at::Tensor mask;                 ///< [B(2B), 1, h, w] in the run dtype
  at::Tensor masked_image_latents; ///< [B(2B), 4, h, w]
  at::Tensor image_latents;        ///< [B, 4, h, w]: 4-channel UNets only
  at::Tensor noise;                ///< [B, 4, h, w]
  bool concat = false;             ///< a 9-channel UNet: mask and masked latents join its input
};

/// image_start() for the flow-matching families with an AutoencoderKL (FluxImg2ImgPipeline,
/// StableDiffusion3Img2ImgPipeline): each image encoded in `dtype`, (z - shift_factor) * scaling_factor.
ImageStart flow_image_start(const std::vector<ImageRequest>& batch, AutoencoderKLImpl& vae,
                            const AutoencoderKLConfig& config, at::ScalarType dtype, const at::Device& device);

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
  const InpaintState* inpaint = nullptr;      ///< inpainting: the mask and masked image, or null
  bool cfg = false;
  double guidance_scale = 1.0;
  double guidance_rescale = 0.0;
  std::function<void()> check_cancelled;      ///< asked before every step
  DeepCache* deep_cache = nullptr;            ///< set: the UNet runs under DeepCache (deep_cache.h), this run's state
  /// --cuda-graphs (nn/cuda_graphs.h): the pipeline's graphs (null without) and the calls' context (the LoRA set);
  /// the UNet's calls then replay from them.
  nn::DenoiserGraphs* graphs = nullptr;
  std::string graph_context;
};

/// diffusers' denoising loop of StableDiffusionPipeline and StableDiffusionXLPipeline, from
/// `latents` (the initial noise already scaled by init_noise_sigma, or img2img's noised image
/// latents, the loop then starting at the scheduler's begin_index()) on `device`: per step,
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

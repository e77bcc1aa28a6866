#include "unet_pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <optional>

#include "dpinfer/pipeline/loading/component_loading.h"
#include "pipeline_info.h"

namespace dpinfer::pipeline {

using nlohmann::json;

UNetPipeline::UNetPipeline(const ModelDir& model, const LoadRequest& request, const Family& family)
    : family_(family),
      dtype_(parse_dtype(request.dtype)),
      device_(request.device),
      unet_config_(UNetConfig::from_json(model.at("unet").config)),
      vae_config_(AutoencoderKLConfig::from_json(model.at("vae").config)) {
  // diffusers maps the original block numbers with the config's one layers_per_block
  // (_maybe_map_sgm_blocks_to_diffusers); SD and SDXL configs give one number.
  start_components(family_, request, unet_config_.layers_per_block.front());
}

void UNetPipeline::resolve_settings_and_scheduler(const ModelDir& model, const LoadRequest& request) {
  info_.settings = resolve_settings(family_.settings, request.settings, "--set", family_.label);
  check_settings(info_.settings);
  scheduler_ = std::make_unique<PipelineScheduler>(
      model.at("scheduler").config,
      SchedulerRequest{request.scheduler, info_.settings["eta"].get<double>(), family_.scheduler_rewrite,
                       family_.prediction});
}

void UNetPipeline::load_unet_and_vae(const ModelDir& model, const LoadRequest& request, at::ScalarType vae_dtype) {
  c10::InferenceMode guard;
  const auto options = at::TensorOptions().dtype(dtype_).device(device_);
  load_denoiser(model, "unet", unet_, options);
  if (request.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
  LoadOptions vae_load;
  if (vae_dtype != dtype_) vae_load.round_through = dtype_;
  load_vae(model, "vae", vae_, options.dtype(vae_dtype), request.vae_tiling, vae_load);  // and its tiling
  vae_dtype_ = vae_dtype;
  info_ = pipeline_info(model, request, family_, scheduler_->name(), info_.settings, family_.default_size(model));
  // An inpainting checkpoint's UNet takes the latents, the mask and the masked image's latents.
  info_.requires_mask = unet_config_.in_channels == 2 * vae_config_.latent_channels + 1;
}

void UNetPipeline::with_vae_encoder(const std::function<void()>& encode) {
  vae_phase();  // --offload model: the VAE to the device to encode, the UNet back after
  const at::ScalarType encode_dtype = upcast_vae_encode_ ? at::kFloat : vae_dtype_;
  if (encode_dtype == vae_dtype_) {
    encode();
    denoiser_phase();
    return;
  }
  vae_->to(encode_dtype);  // the run dtype's weights, exactly, in float32
  try {
    encode();
  } catch (...) {
    vae_->to(vae_dtype_);
    throw;
  }
  vae_->to(vae_dtype_);
  denoiser_phase();
}

// Ref: StableDiffusionImg2ImgPipeline.prepare_latents and StableDiffusionXL{Img2Img,Inpaint}Pipeline._encode_vae_image.
at::Tensor UNetPipeline::encode_image(const at::Tensor& image, at::Generator& generator) {
  // image.to(dtype), then .float() for SDXL's upcast encoder: rounded through the run dtype either way.
  at::Tensor x = image.to(device_, dtype_);
  if (upcast_vae_encode_) x = x.to(at::kFloat);
  at::Tensor z = sample_latent(vae_->encode(x), generator).to(dtype_);
  const AutoencoderKLConfig& c = vae_config_;
  if (c.latents_mean && c.latents_std) {
    const auto stats = [&](const std::vector<double>& v) {
      // torch.tensor(config list): float32 first, then the run dtype.
      return at::tensor(v, at::kDouble).to(at::kFloat).view({1, -1, 1, 1}).to(z.device(), z.scalar_type());
    };
    return (z - stats(*c.latents_mean)) * c.scaling_factor / stats(*c.latents_std);
  }
  return c.scaling_factor * z;
}

// Ref: StableDiffusionInpaintPipeline.__call__ (get_timesteps, prepare_latents, prepare_mask_latents), with a
// list of generators: per item's generator, the image's latent sample (a 4-channel UNet's blend needs it, and
// any strength below 1 starts from it), then the noise, then the masked image's latent sample.
at::Tensor UNetPipeline::inpaint_start(const std::vector<ImageRequest>& batch, Scheduler& scheduler, bool cfg,
                                       InpaintState& s) {
  const ImageRequest& first = batch.front();
  const int64_t latent_channels = vae_config_.latent_channels;
  s.concat = unet_config_.in_channels == 2 * latent_channels + 1;
  if (!s.concat && unet_config_.in_channels != latent_channels)
    throw InputError("unet config: in_channels " + std::to_string(unet_config_.in_channels) +
                     " is neither the VAE's latent channels nor an inpainting UNet's (2 x latents + 1)");
  scheduler.set_begin_index(img2img_start(first.steps, first.strength, StrengthRounding::kIntSteps));
  const bool strength_max = first.strength == 1.0;
  const bool with_image_latents = !s.concat || !strength_max;
  const int64_t factor = vae_config_.scale_factor();
  const int64_t h = first.height / factor, w = first.width / factor;
  inpaint_generators_.clear();
  std::vector<at::Tensor> image_latents, noise, masks, masked_latents;
  with_vae_encoder([&] {
    for (const ImageRequest& r : batch) {
      if (!r.image || !r.mask) throw InputError("inpainting: every item of the batch needs an image and a mask");
      inpaint_generators_.push_back(at::make_generator<at::CPUGeneratorImpl>(r.seed));
      at::Generator& generator = inpaint_generators_.back();
      const at::Tensor init_image = vae_input(*r.image, at::kFloat, at::kCPU);  // [1, 3, H, W] float32, channels-last
      if (with_image_latents) image_latents.push_back(encode_image(init_image, generator));
      noise.push_back(at::randn({1, latent_channels, h, w}, generator, at::TensorOptions().dtype(dtype_)));
      const at::Tensor mask = binary_mask(*r.mask);  // [1, 1, H, W]
      masked_latents.push_back(encode_image(init_image * (mask < 0.5), generator));
      masks.push_back(at::upsample_nearest2d(mask, {h, w}));  // F.interpolate(mask, size=(h, w)), nearest
    }
  });
  s.noise = at::cat(noise).to(device_);
  if (with_image_latents) s.image_latents = at::cat(image_latents).to(device_);
  s.mask = at::cat(masks).to(device_, dtype_);
  s.masked_image_latents = at::cat(masked_latents).to(device_, dtype_);
  if (cfg) {
    s.mask = at::cat({s.mask, s.mask});
    s.masked_image_latents = at::cat({s.masked_image_latents, s.masked_image_latents});
  }
  return strength_max ? s.noise * scheduler.init_noise_sigma()
                      : scheduler.add_noise(s.image_latents, s.noise, scheduler.begin_index());
}

void UNetPipeline::check_settings(const json& settings) const {
  // DeepCache's cache_branch_id is 3 * block + layer (deep_cache.h); a block past the UNet's down blocks would
  // leave the reference caching only the mid block, which dpinfer does not offer.
  const int64_t branch = settings.value("deep_cache_branch", int64_t{0});
  const int64_t blocks = static_cast<int64_t>(unet_config_.block_out_channels.size());
  if (branch >= 3 * blocks)
    throw InputError("deep_cache_branch " + std::to_string(branch) + ": this UNet has " + std::to_string(blocks) +
                     " down blocks, so DeepCache's branches are 0.." + std::to_string(3 * blocks - 1) +
                     " (3 * block + layer)");
}

UNetPipeline::Batch UNetPipeline::begin_batch(const std::vector<ImageRequest>& batch) const {
  const ImageRequest& first = batch.front();
  check_image_size(first.width, first.height, info_.size_multiple, vae_config_.scale_factor());
  Batch state;
  state.settings = resolve_settings(info_.setting_specs, first.settings, "image settings", family_.label);
  check_settings(state.settings);
  state.scheduler = &scheduler_->with_eta(state.settings["eta"].get<double>());
  // Ref: StableDiffusionPipeline.do_classifier_free_guidance (the same in SDXL's).
  state.cfg = first.guidance_scale > 1.0 && !unet_config_.time_cond_proj_dim;
  return state;
}

std::vector<RgbImage> UNetPipeline::denoise_and_decode(
    const std::vector<ImageRequest>& batch, const Batch& state, DenoiseInputs conditioning,
    const std::function<at::Tensor(const at::Tensor&)>& to_vae_space) {
  denoiser_phase();
  c10::InferenceMode guard;
  const ImageRequest& first = batch.front();
  Scheduler& scheduler = *state.scheduler;
  scheduler.set_timesteps(first.steps);
  const int64_t factor = vae_config_.scale_factor();
  conditioning.cfg = state.cfg;
  conditioning.guidance_scale = first.guidance_scale;
  conditioning.guidance_rescale = state.settings["guidance_rescale"].get<double>();
  conditioning.check_cancelled = [this] { throw_if_cancelled(); };
  // DeepCache (deep_cache.h): a state for this batch, as the reference's helper keeps one over a pipeline call.
  std::optional<DeepCache> deep_cache;
  const int64_t interval = state.settings["deep_cache_interval"].get<int64_t>();
  if (interval > 1) {
    deep_cache.emplace(interval, state.settings["deep_cache_branch"].get<int64_t>());
    conditioning.deep_cache = &*deep_cache;
  }
  // --cuda-graphs: DeepCache decides on the host which branch runs, as the DiTs' step caches do (refused alike).
  nn::check_no_step_cache(graphs_.get(), deep_cache.has_value(), "deep_cache_interval");
  conditioning.graphs = graphs_.get();
  conditioning.graph_context = "unet/" + lora_key("unet");
  at::Tensor latents;
  InpaintState inpaint;
  if (first.mask) {
    latents = inpaint_start(batch, scheduler, state.cfg, inpaint);
    conditioning.inpaint = &inpaint;
    latents = denoise(*unet_, scheduler, latents, conditioning, inpaint_generators_, device_);  // [B, 4, h, w]
  } else if (first.image) {
    // Ref: StableDiffusionImg2ImgPipeline / StableDiffusionXLImg2ImgPipeline: get_timesteps, then
    // prepare_latents: each image encoded alone with its own generator, scaled, and noised to the
    // first step's level (every scheduler dpinfer has is of order 1, so t_start * order = t_start).
    scheduler.set_begin_index(img2img_start(first.steps, first.strength, StrengthRounding::kIntSteps));
    ImageStart start;
    with_vae_encoder([&] {
      start = image_start(
          batch,
          [this](const RgbImage& image, at::Generator& generator) {
            return encode_image(vae_input(image, at::kFloat, at::kCPU), generator);
          },
          dtype_, device_);
    });
    latents = denoise(*unet_, scheduler, scheduler.add_noise(start.image_latents, start.noise, scheduler.begin_index()), conditioning,
                      start.generators, device_);  // [B, 4, h, w]
  } else {
    BatchNoise noise = batch_noise(batch, unet_config_.in_channels, first.height / factor, first.width / factor,
                                   dtype_, device_);
    latents = denoise(*unet_, scheduler, noise.noise * scheduler.init_noise_sigma(), conditioning, noise.generators,
                      device_);  // [B, 4, h, w]
  }
  if (deep_cache) deep_cache->count_into(statistics_);  // the images of this batch, for the run summary
  nn::count_graphs_into(graphs_.get(), statistics_);
  throw_if_cancelled();
  vae_phase();  // --offload model: the VAE to the device to decode
  return to_rgb(vae_->decode(to_vae_space(latents)));  // [B, 3, H, W]
}

}  // namespace dpinfer::pipeline

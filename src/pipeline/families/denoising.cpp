#include "denoising.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

BatchNoise batch_noise(const std::vector<ImageRequest>& batch, int64_t channels, int64_t h, int64_t w,
                       at::ScalarType dtype, const at::Device& device) {
  BatchNoise out;
  std::vector<at::Tensor> rows;
  for (const ImageRequest& r : batch) {
    out.generators.push_back(at::make_generator<at::CPUGeneratorImpl>(r.seed));
    rows.push_back(at::randn({1, channels, h, w}, out.generators.back(), at::TensorOptions().dtype(dtype)));
  }
  out.noise = at::cat(rows).to(device);
  return out;
}

int64_t img2img_start(int steps, double strength, StrengthRounding rounding) {
  // Ref: StableDiffusionImg2ImgPipeline.get_timesteps (int) and FluxImg2ImgPipeline.get_timesteps (float).
  int64_t t_start = 0;
  if (rounding == StrengthRounding::kIntSteps) {
    const int64_t init_timestep = std::min<int64_t>(static_cast<int64_t>(steps * strength), steps);
    t_start = std::max<int64_t>(steps - init_timestep, 0);
  } else {
    const double init_timestep = std::min(steps * strength, static_cast<double>(steps));
    t_start = static_cast<int64_t>(std::max(steps - init_timestep, 0.0));
  }
  if (steps - t_start < 1)
    throw InputError("strength " + fmt::format("{}", strength) + " of " + std::to_string(steps) +
                     " steps runs no denoising step; raise the strength or the steps");
  return t_start;
}

std::vector<RgbImage> generate_by_reference_size(
    const std::vector<ImageRequest>& batch,
    const std::function<std::vector<RgbImage>(const std::vector<ImageRequest>&)>& one_size) {
  auto size_of = [](const ImageRequest& r) {  // the sizes of its references in order; none without
    std::vector<std::array<int, 2>> sizes;
    if (r.image) sizes.push_back({r.image->width, r.image->height});
    for (const auto& more : r.more_images) sizes.push_back({more->width, more->height});
    return sizes;
  };
  std::vector<std::vector<size_t>> groups;  // request indices, one size each, in order of first appearance
  for (size_t i = 0; i < batch.size(); ++i) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const std::vector<size_t>& g) { return size_of(batch[g.front()]) == size_of(batch[i]); });
    if (it == groups.end()) groups.push_back({i});
    else it->push_back(i);
  }
  if (groups.size() <= 1) return one_size(batch);
  std::vector<RgbImage> out(batch.size());
  for (const std::vector<size_t>& g : groups) {
    std::vector<ImageRequest> part;
    for (size_t i : g) part.push_back(batch[i]);
    std::vector<RgbImage> made = one_size(part);
    for (size_t k = 0; k < g.size(); ++k) out[g[k]] = std::move(made[k]);
  }
  return out;
}

std::vector<const RgbImage*> references_of(const ImageRequest& r) {
  std::vector<const RgbImage*> out;
  if (r.image) out.push_back(r.image.get());
  for (const auto& more : r.more_images) out.push_back(more.get());
  return out;
}

at::Tensor vae_input(const RgbImage& image, at::ScalarType dtype, const at::Device& device) {
  // numpy: np.array(images).astype(np.float32) / 255.0, a float32 division per value.
  std::array<float, 256> level{};
  for (int v = 0; v < 256; ++v) level[static_cast<size_t>(v)] = static_cast<float>(v) / 255.0f;
  at::Tensor x = at::empty({1, image.height, image.width, 3}, at::kFloat);
  float* out = x.data_ptr<float>();
  for (size_t k = 0; k < image.pixels.size(); ++k) out[k] = level[image.pixels[k]];
  // numpy_to_pt: torch.from_numpy(images.transpose(0, 3, 1, 2)), a view of the HWC pixels, so the tensor
  // is channels-last in memory, and stays so through normalize and .to(). Kept as it is: the VAE's
  // kernels pick their path by the layout, and in bf16 the two paths round apart.
  x = x.permute({0, 3, 1, 2});
  x = 2.0 * x - 1.0;  // VaeImageProcessor.normalize
  return x.to(device, dtype);
}

at::Tensor binary_mask(const GrayImage& mask) {
  // pil_to_numpy: float32 / 255; numpy_to_pt of a grayscale batch: [1, 1, H, W]; binarize at 0.5.
  at::Tensor m = at::empty({1, 1, mask.height, mask.width}, at::kFloat);
  float* out = m.data_ptr<float>();
  for (size_t k = 0; k < mask.pixels.size(); ++k)
    out[k] = static_cast<float>(mask.pixels[k]) / 255.0f < 0.5f ? 0.0f : 1.0f;
  return m;
}

at::Tensor latent_masks(const std::vector<ImageRequest>& batch, int64_t h, int64_t w) {
  std::vector<at::Tensor> masks;
  for (const ImageRequest& r : batch) {
    if (!r.mask) throw InputError("inpainting: every item of the batch needs a mask");
    masks.push_back(at::upsample_nearest2d(binary_mask(*r.mask), {h, w}));
  }
  return at::cat(masks);
}

at::Tensor blend_kept_region(const Scheduler& scheduler, const at::Tensor& latents, const at::Tensor& image_latents,
                             const at::Tensor& noise, const at::Tensor& mask, int64_t next) {
  const at::Tensor proper =
      next < scheduler.timesteps().size(0) ? scheduler.add_noise(image_latents, noise, next) : image_latents;
  return (1 - mask) * proper + mask * latents;
}

at::Tensor sample_latent(const LatentDist& dist, at::Generator& generator) {
  at::Tensor eps = at::randn(dist.mean.sizes(), generator, at::TensorOptions().dtype(dist.mean.scalar_type()));
  at::Tensor std = at::exp(0.5 * dist.logvar);
  return dist.mean + std * eps.to(dist.mean.device());
}

ImageStart image_start(const std::vector<ImageRequest>& batch,
                       const std::function<at::Tensor(const RgbImage& image, at::Generator& generator)>& encode,
                       at::ScalarType dtype, const at::Device& device) {
  ImageStart out;
  std::vector<at::Tensor> latents, noise;
  for (const ImageRequest& r : batch) {
    if (!r.image) throw Error("image_start: a request of the batch has no input image");
    out.generators.push_back(at::make_generator<at::CPUGeneratorImpl>(r.seed));
    latents.push_back(encode(*r.image, out.generators.back()));
    noise.push_back(at::randn(latents.back().sizes(), out.generators.back(), at::TensorOptions().dtype(dtype)));
  }
  out.image_latents = at::cat(latents).to(device);
  out.noise = at::cat(noise).to(device);
  return out;
}

ImageStart flow_image_start(const std::vector<ImageRequest>& batch, AutoencoderKLImpl& vae,
                            const AutoencoderKLConfig& config, at::ScalarType dtype, const at::Device& device) {
  if (!config.shift_factor) throw Error("flow_image_start: the VAE config has no shift_factor");
  return image_start(
      batch,
      [&](const RgbImage& image, at::Generator& generator) {
        at::Tensor z = sample_latent(vae.encode(vae_input(image, dtype, device)), generator);
        return (z - *config.shift_factor) * config.scaling_factor;
      },
      dtype, device);
}

PipelineScheduler::PipelineScheduler(nlohmann::json config, SchedulerRequest request)
    : config_(std::move(config)), request_(std::move(request)), scheduler_(make_scheduler(config_, request_)) {}

Scheduler& PipelineScheduler::with_eta(double eta) {
  if (eta != request_.eta) {
    request_.eta = eta;
    scheduler_ = make_scheduler(config_, request_);
  }
  return *scheduler_;
}

// Ref: diffusers StableDiffusionPipeline.__call__ and StableDiffusionXLPipeline.__call__ (the loop).
at::Tensor denoise(UNet2DConditionModelImpl& unet, Scheduler& scheduler, at::Tensor latents,
                   const DenoiseInputs& inputs, std::vector<at::Generator>& generators, const at::Device& device) {
  const at::Tensor& timesteps = scheduler.timesteps();
  const int64_t begin = scheduler.begin_index();  // img2img: the loop over timesteps[t_start:]
  // --cuda-graphs: where the UNet's weights are for this batch's calls (after any VAE encode of the batch).
  const uint64_t weights = nn::denoiser_weights(inputs.graphs, unet);
  for (int64_t i = 0; i + begin < timesteps.size(0); ++i) {
    if (inputs.check_cancelled) inputs.check_cancelled();
    at::Tensor x = inputs.cfg ? at::cat({latents, latents}) : latents;
    x = scheduler.scale_model_input(x, i);
    if (inputs.inpaint && inputs.inpaint->concat)
      x = at::cat({x, inputs.inpaint->mask, inputs.inpaint->masked_image_latents}, 1);  // 9 channels
    // DeepCache decides from the step's place in the whole schedule (img2img's first step included).
    if (inputs.deep_cache) inputs.deep_cache->next_call(timesteps, begin + i, latents.size(0));
    // One UNet call: eager, or replayed from its CUDA graph (--cuda-graphs; the same kernels). Its inputs are tensors
    // on the device, SDXL's added conditioning too; the forward reads nothing back from the device.
    const AddedConditioning* added = inputs.added;
    at::Tensor eps = nn::run_denoiser(
        inputs.graphs,
        {x, timesteps[begin + i].to(device), inputs.embeds, added ? added->text_embeds : at::Tensor(),
         added ? added->time_ids : at::Tensor()},
        inputs.graph_context, weights, [&](const std::vector<at::Tensor>& v) {
          const AddedConditioning replayed{v[3], v[4]};
          return unet.forward(v[0], v[1], v[2], {}, added ? &replayed : nullptr, inputs.deep_cache);
        });
    if (inputs.cfg) eps = guided(eps, inputs.guidance_scale, inputs.guidance_rescale);
    latents = scheduler.step(eps, i, latents, generators);
    if (inputs.inpaint && !inputs.inpaint->concat) {
      // Ref: StableDiffusionInpaintPipeline, 4-channel UNet: the kept region is the image noised to the
      // next step's level (none after the last), the repainted one the model's.
      const InpaintState& s = *inputs.inpaint;
      latents = blend_kept_region(scheduler, latents, s.image_latents, s.noise, inputs.cfg ? s.mask.chunk(2)[0] : s.mask,
                                  begin + i + 1);
    }
  }
  return latents;
}

// Ref: diffusers StableDiffusionPipeline.__call__ (the guidance step) and rescale_noise_cfg.
at::Tensor guided(const at::Tensor& model_output, double guidance_scale, double rescale) {
  auto parts = model_output.chunk(2);
  const at::Tensor& uncond = parts[0];
  const at::Tensor& text = parts[1];
  at::Tensor out = uncond + guidance_scale * (text - uncond);
  if (rescale <= 0) return out;
  // std is the unbiased one, as torch.std.
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < text.dim(); ++d) dims.push_back(d);
  at::Tensor std_text = text.std(dims, /*unbiased=*/true, /*keepdim=*/true);
  at::Tensor std_cfg = out.std(dims, /*unbiased=*/true, /*keepdim=*/true);
  at::Tensor rescaled = out * (std_text / std_cfg);
  return rescale * rescaled + (1 - rescale) * out;
}

void check_image_size(int width, int height, int multiple, int64_t scale_factor) {
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (width % multiple || height % multiple)
    throw InputError("image size " + size + " must be a multiple of " + std::to_string(multiple));
  if (width % scale_factor || height % scale_factor)
    throw InputError("image size " + size + " must be a multiple of the VAE's scale factor " +
                     std::to_string(scale_factor));
}

std::vector<RgbImage> to_rgb(const at::Tensor& images) {
  at::Tensor image = (images * 0.5 + 0.5).clamp(0, 1);
  at::Tensor hwc = image.to(at::kCPU).permute({0, 2, 3, 1}).to(at::kFloat);
  at::Tensor finite = at::isfinite(hwc).flatten(1).all(1);
  at::Tensor bytes = (hwc * 255).round().to(at::kByte).contiguous();
  std::vector<RgbImage> out;
  for (int64_t k = 0; k < bytes.size(0); ++k) {
    RgbImage img;
    img.height = static_cast<int>(bytes.size(1));
    img.width = static_cast<int>(bytes.size(2));
    const uint8_t* p = bytes[k].data_ptr<uint8_t>();
    img.pixels.assign(p, p + bytes[k].numel());
    img.finite = finite[k].item<bool>();
    out.push_back(std::move(img));
  }
  return out;
}

void warn_truncated(const std::string& text, bool negative, int64_t dropped, int max_length,
                    const std::string& encoder) {
  if (dropped <= 0) return;
  log::warn("the {}prompt '{}' is too long for {}: {} token(s) past {} were dropped", negative ? "negative " : "",
            printable(io::utf8_prefix(text, 60)), encoder, dropped, max_length);
}

}  // namespace dpinfer::pipeline

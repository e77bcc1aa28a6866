#include "dpinfer/pipeline/stable_diffusion.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

#include <filesystem>

#include "dpinfer/io/utf8.h"
#include "dpinfer/pipeline/autoencoder_kl.h"
#include "dpinfer/pipeline/clip_text_model.h"
#include "dpinfer/pipeline/clip_tokenizer.h"
#include "dpinfer/pipeline/model_configs.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/scheduler.h"
#include "dpinfer/pipeline/unet_2d_condition.h"
#include "dpinfer/pipeline/weights.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {
namespace {

at::ScalarType parse_dtype(const std::string& d) {
  if (d == "fp32") return at::kFloat;
  if (d == "fp16") return at::kHalf;
  if (d == "bf16") return at::kBFloat16;
  throw InputError("dtype: expected fp32, fp16 or bf16, got '" + d + "'");
}

/// The component's weight files: the variant when it has one, else the plain ones
/// (diffusers falls back the same way).
std::vector<std::string> weight_files(const Component& c, const std::string& variant) {
  if (!variant.empty() && !has_weight_variant(c.path, variant)) {
    log::warn("{} has no '{}' variant; loading its plain weights", c.name, variant);
    return find_weight_files(c.path, "").files;
  }
  return find_weight_files(c.path, variant).files;
}

/// Builds `module` on the CPU, loads its weights in the target dtype (load_weights
/// converts to the parameters' dtype, so the bytes are copied once), then moves it.
template <typename Module>
Module load_component(Module module, const Component& c, const std::string& variant, const KeyRenames& renames,
                      at::ScalarType dtype, const at::Device& device) {
  module->to(dtype);
  load_weights(*module, weight_files(c, variant), renames, c.name);
  module->to(device);
  module->eval();
  return module;
}

const KeyRenames& no_renames() {
  static const KeyRenames none;
  return none;
}

class StableDiffusionPipeline : public TextToImage {
 public:
  explicit StableDiffusionPipeline(const StableDiffusionOptions& o)
      : options_(o), dtype_(parse_dtype(o.dtype)), device_(o.device) {
    ModelDir md = resolve_model(o.model, o.variant);
    tokenizer_ = std::make_unique<CLIPTokenizer>(CLIPTokenizer::from_dir(md.tokenizer.path));
    auto te_config = CLIPTextConfig::from_json(md.text_encoder.config);
    if (o.clip_skip < 0 || o.clip_skip >= te_config.num_hidden_layers)
      throw InputError("--clip-skip " + std::to_string(o.clip_skip) + ": the text encoder has " +
                       std::to_string(te_config.num_hidden_layers) + " layers; use 0.." +
                       std::to_string(te_config.num_hidden_layers - 1));
    unet_config_ = UNetConfig::from_json(md.unet.config);
    vae_config_ = AutoencoderKLConfig::from_json(md.vae.config);
    c10::InferenceMode guard;
    text_encoder_ = load_component(CLIPTextModel(te_config), md.text_encoder, o.variant, clip_text_key_renames(),
                                   dtype_, device_);
    unet_ = load_component(UNet2DConditionModel(unet_config_), md.unet, o.variant, no_renames(), dtype_, device_);
    vae_ = load_component(AutoencoderKL(vae_config_), md.vae, o.variant, vae_key_renames(), dtype_, device_);
    // The pipeline's own rewrite of old scheduler configs (steps_offset=1,
    // clip_sample=False) happens in make_scheduler.
    scheduler_config_ = md.scheduler.config;
    scheduler_ = make_scheduler(scheduler_config_, o.scheduler, o.eta);

    const int64_t factor = int64_t{1} << (vae_config_.block_out_channels.size() - 1);
    auto sample = unet_config_.sample_size.value_or(std::array<int64_t, 2>{64, 64});
    info_.model_name = md.name;
    info_.model_path = md.root;
    info_.scheduler_name = scheduler_->name();
    info_.sampler_label = a1111_sampler_name(info_.scheduler_name);
    info_.device = o.device;
    info_.dtype = o.dtype;
    info_.default_height = static_cast<int>(sample[0] * factor);
    info_.default_width = static_cast<int>(sample[1] * factor);
    info_.default_steps = 50;
    info_.default_guidance_scale = 7.5;
    info_.clip_skip = o.clip_skip;
    info_.guidance_rescale = o.guidance_rescale;
    vae_scale_factor_ = factor;
  }

  const PipelineInfo& info() const override { return info_; }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    if (first.width % 8 || first.height % 8)
      throw InputError("image size " + std::to_string(first.width) + "x" + std::to_string(first.height) +
                       " must be a multiple of 8");
    if (first.width % vae_scale_factor_ || first.height % vae_scale_factor_)
      throw InputError("image size " + std::to_string(first.width) + "x" + std::to_string(first.height) +
                       " must be a multiple of the VAE's scale factor " + std::to_string(vae_scale_factor_));
    c10::InferenceMode guard;
    const int64_t b = static_cast<int64_t>(batch.size());
    const double g = first.guidance_scale;
    // Ref: StableDiffusionPipeline.do_classifier_free_guidance.
    const bool cfg = g > 1.0 && !unet_config_.time_cond_proj_dim;

    at::Tensor cond = encode(batch, /*negative=*/false);  // [B, 77, D]
    at::Tensor embeds = cond;
    if (cfg) embeds = at::cat({encode(batch, /*negative=*/true), cond});  // unconditional half first

    scheduler_->set_timesteps(first.steps);
    // Each image's noise comes from its own CPU generator, drawn in the model dtype
    // on the CPU and then moved, as diffusers' randn_tensor does with a list of
    // generators; the scheduler's step noise continues from the same generators.
    std::vector<at::Generator> gens;
    std::vector<at::Tensor> noise;
    const int64_t h = first.height / vae_scale_factor_, w = first.width / vae_scale_factor_;
    for (const ImageRequest& r : batch) {
      gens.push_back(at::make_generator<at::CPUGeneratorImpl>(r.seed));
      noise.push_back(at::randn({1, unet_config_.in_channels, h, w}, gens.back(), at::TensorOptions().dtype(dtype_)));
    }
    at::Tensor latents = at::cat(noise).to(device_) * scheduler_->init_noise_sigma();  // [B, 4, h, w]

    const at::Tensor& timesteps = scheduler_->timesteps();
    for (int64_t i = 0; i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      at::Tensor t = timesteps[i];
      at::Tensor x = cfg ? at::cat({latents, latents}) : latents;
      x = scheduler_->scale_model_input(x, i);
      at::Tensor eps = unet_->forward(x, t.to(device_), embeds);
      if (cfg) {
        auto parts = eps.chunk(2);
        at::Tensor uncond = parts[0], text = parts[1];
        eps = uncond + g * (text - uncond);
        if (options_.guidance_rescale > 0) eps = rescale_noise_cfg(eps, text, options_.guidance_rescale);
      }
      latents = scheduler_->step(eps, i, latents, gens);
    }

    throw_if_cancelled();
    at::Tensor image = vae_->decode(latents / vae_config_.scaling_factor);  // [B, 3, H, W]
    // Ref: VaeImageProcessor.postprocess: denormalize in the model dtype, then
    // float32 on the CPU, x255, round half to even, uint8.
    image = (image * 0.5 + 0.5).clamp(0, 1);
    at::Tensor hwc = image.to(at::kCPU).permute({0, 2, 3, 1}).to(at::kFloat);
    at::Tensor finite = at::isfinite(hwc).flatten(1).all(1);
    at::Tensor bytes = (hwc * 255).round().to(at::kByte).contiguous();
    std::vector<RgbImage> out;
    for (int64_t k = 0; k < b; ++k) {
      RgbImage img;
      img.width = first.width;
      img.height = first.height;
      const uint8_t* p = bytes[k].data_ptr<uint8_t>();
      img.pixels.assign(p, p + bytes[k].numel());
      img.finite = finite[k].item<bool>();
      out.push_back(std::move(img));
    }
    return out;
  }

 private:
  /// Ref: StableDiffusionPipeline.encode_prompt. The negative side is encoded
  /// without clip_skip, as diffusers does.
  at::Tensor encode(const std::vector<ImageRequest>& batch, bool negative) {
    const int max_len = tokenizer_->model_max_length();
    std::vector<int64_t> ids;
    for (const ImageRequest& r : batch) {
      Encoding e = tokenizer_->encode(negative ? r.negative_prompt : r.prompt, max_len);
      if (e.dropped_tokens > 0)
        log::warn("the {}prompt '{}' is too long for CLIP: {} token(s) past {} were dropped", negative ? "negative " : "",
                  io::utf8_prefix(negative ? r.negative_prompt : r.prompt, 60), e.dropped_tokens, max_len);
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    }
    at::Tensor t = at::tensor(ids, at::kLong).view({static_cast<int64_t>(batch.size()), -1}).to(device_);
    return text_encoder_->encode(t, negative ? 0 : options_.clip_skip).to(dtype_);
  }

  /// Ref: diffusers rescale_noise_cfg (Lin et al., "Common Diffusion Noise Schedules
  /// and Sample Steps are Flawed", §3.4). std is the unbiased one, as torch.std.
  static at::Tensor rescale_noise_cfg(const at::Tensor& cfg, const at::Tensor& text, double r) {
    std::vector<int64_t> dims;
    for (int64_t d = 1; d < text.dim(); ++d) dims.push_back(d);
    at::Tensor std_text = text.std(dims, /*unbiased=*/true, /*keepdim=*/true);
    at::Tensor std_cfg = cfg.std(dims, /*unbiased=*/true, /*keepdim=*/true);
    at::Tensor rescaled = cfg * (std_text / std_cfg);
    return r * rescaled + (1 - r) * cfg;
  }

  StableDiffusionOptions options_;
  at::ScalarType dtype_;
  at::Device device_;
  std::unique_ptr<CLIPTokenizer> tokenizer_;
  CLIPTextModel text_encoder_{nullptr};
  UNet2DConditionModel unet_{nullptr};
  AutoencoderKL vae_{nullptr};
  UNetConfig unet_config_;
  AutoencoderKLConfig vae_config_;
  nlohmann::json scheduler_config_;
  std::unique_ptr<Scheduler> scheduler_;
  PipelineInfo info_;
  int64_t vae_scale_factor_ = 8;
};

}  // namespace

std::string a1111_sampler_name(const std::string& s) {
  if (s == "pndm") return "PNDM";
  if (s == "ddim") return "DDIM";
  if (s == "euler") return "Euler";
  if (s == "euler_a") return "Euler a";
  if (s == "dpm++2m") return "DPM++ 2M";
  if (s == "dpm++2m-karras") return "DPM++ 2M Karras";
  if (s == "lms") return "LMS";
  if (s == "unipc") return "UniPC";
  return s;
}

std::unique_ptr<TextToImage> load_stable_diffusion(const StableDiffusionOptions& options) {
  return std::make_unique<StableDiffusionPipeline>(options);
}

}  // namespace dpinfer::pipeline

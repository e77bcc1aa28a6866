// Ref: diffusers/pipelines/stable_diffusion/pipeline_stable_diffusion.py StableDiffusionPipeline
#include "dpinfer/pipeline/families/stable_diffusion.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "dpinfer/pipeline/loading/component_loading.h"
#include "denoising.h"
#include "pipeline_info.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

class StableDiffusionPipeline : public TextToImage {
 public:
  StableDiffusionPipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family), dtype_(parse_dtype(r.dtype)), device_(r.device) {
    const Component& tok = md.at("tokenizer");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);
    te_layers_ = CLIPTextConfig::from_json(md.at("text_encoder").config).num_hidden_layers;
    unet_config_ = UNetConfig::from_json(md.at("unet").config);
    vae_config_ = AutoencoderKLConfig::from_json(md.at("vae").config);
    if (unet_config_.addition_embed_type != UNetConfig::AdditionEmbedType::kNone)
      throw InputError("unet config: addition_embed_type text_time belongs to SDXL, but model_index.json names a " +
                       md.model_index.value("_class_name", std::string()) + "; check the model");
    info_.settings = resolve_settings(family.settings, r.settings, "--set", family.label);
    check_settings(info_.settings);
    // The scheduler before any weights: a config or --scheduler it refuses costs nothing.
    scheduler_ = std::make_unique<PipelineScheduler>(
        md.at("scheduler").config,
        SchedulerRequest{r.scheduler, info_.settings["eta"].get<double>(), family.scheduler_rewrite});

    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    text_encoder_ = load_component_as<CLIPTextModelImpl>(md.at("text_encoder"), options);
    unet_ = load_component_as<UNet2DConditionModelImpl>(md.at("unet"), options);
    vae_ = load_component_as<AutoencoderKLImpl>(md.at("vae"), options);

    info_ = pipeline_info(md, r, family, scheduler_->name(), info_.settings, family.default_size(md));
  }

  const PipelineInfo& info() const override { return info_; }

  void check_settings(const json& settings) const override {
    const int64_t clip_skip = settings.value("clip_skip", int64_t{0});
    if (clip_skip >= te_layers_)
      throw InputError("clip_skip " + std::to_string(clip_skip) + ": the text encoder has " +
                       std::to_string(te_layers_) + " layers; use 0.." + std::to_string(te_layers_ - 1));
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    check_image_size(first.width, first.height, info_.size_multiple, vae_config_.scale_factor());
    const json settings = resolve_settings(info_.setting_specs, first.settings, "image settings", family_.label);
    check_settings(settings);
    const int64_t clip_skip = settings["clip_skip"].get<int64_t>();
    Scheduler& scheduler = scheduler_->with_eta(settings["eta"].get<double>());

    c10::InferenceMode guard;
    const double g = first.guidance_scale;
    // Ref: StableDiffusionPipeline.do_classifier_free_guidance.
    const bool cfg = g > 1.0 && !unet_config_.time_cond_proj_dim;

    at::Tensor cond = encode(batch, /*negative=*/false, clip_skip);  // [B, 77, D]
    at::Tensor embeds = cond;
    // The negative side is encoded without clip_skip, as diffusers does.
    if (cfg) embeds = at::cat({encode(batch, /*negative=*/true, 0), cond});  // unconditional half first

    scheduler.set_timesteps(first.steps);
    const int64_t factor = vae_config_.scale_factor();
    BatchNoise noise = batch_noise(batch, unet_config_.in_channels, first.height / factor, first.width / factor,
                                   dtype_, device_);
    DenoiseInputs inputs{embeds, nullptr, cfg, g, settings["guidance_rescale"].get<double>(),
                         [this] { throw_if_cancelled(); }};
    at::Tensor latents = denoise(*unet_, scheduler, noise.noise * scheduler.init_noise_sigma(), inputs,
                                 noise.generators, device_);  // [B, 4, h, w]

    throw_if_cancelled();
    return to_rgb(vae_->decode(latents / vae_config_.scaling_factor));  // [B, 3, H, W]
  }

 private:
  /// Ref: StableDiffusionPipeline.encode_prompt.
  at::Tensor encode(const std::vector<ImageRequest>& batch, bool negative, int64_t clip_skip) {
    const int max_len = tokenizer_->model_max_length();
    std::vector<int64_t> ids;
    for (const ImageRequest& r : batch) {
      const std::string& text = negative ? r.negative_prompt : r.prompt;
      Encoding e = tokenizer_->encode(text, max_len);
      warn_truncated(text, negative, e.dropped_tokens, max_len, "CLIP");
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    }
    at::Tensor t = at::tensor(ids, at::kLong).view({static_cast<int64_t>(batch.size()), -1}).to(device_);
    return text_encoder_->encode(t, clip_skip).to(dtype_);
  }

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int64_t te_layers_ = 0;
  std::shared_ptr<CLIPTextModelImpl> text_encoder_;
  std::shared_ptr<UNet2DConditionModelImpl> unet_;
  std::shared_ptr<AutoencoderKLImpl> vae_;
  UNetConfig unet_config_;
  AutoencoderKLConfig vae_config_;
  std::unique_ptr<PipelineScheduler> scheduler_;
  PipelineInfo info_;
};

}  // namespace

void stable_diffusion_scheduler_rewrite(json& keys, bool own_class) {
  if (own_class) {
    keys["steps_offset"] = 1;
    keys["clip_sample"] = false;
    return;
  }
  // The rewrite changed only keys the file has; the defaults it rewrote stay listed in
  // _use_default_values, so from_config drops them and the target's defaults apply.
  auto offset = keys.find("steps_offset");
  if (offset != keys.end() && !(offset->is_number() && offset->get<double>() == 1)) keys["steps_offset"] = 1;
  auto clip = keys.find("clip_sample");
  if (clip != keys.end() && clip->is_boolean() && clip->get<bool>()) keys["clip_sample"] = false;
}

std::unique_ptr<TextToImage> load_stable_diffusion(const ModelDir& model, const LoadRequest& request,
                                                   const Family& family) {
  return std::make_unique<StableDiffusionPipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

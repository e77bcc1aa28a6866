// Ref: diffusers/pipelines/flux/pipeline_flux.py FluxPipeline (diffusers 0.36.0): _get_clip_prompt_embeds,
// _get_t5_prompt_embeds, encode_prompt, _prepare_latent_image_ids, _pack_latents, _unpack_latents,
// prepare_latents and __call__. tools/fixtures/make_flux_pipelines.py records its goldens.
#include "dpinfer/pipeline/families/flux.h"

#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "denoising.h"
#include "flux_latents.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_config.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/models/text_encoders/t5_config.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer_config.h"
#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "lora_pipeline.h"
#include "pipeline_info.h"
#include "t5_prompt.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

constexpr int64_t kFluxDefaultSampleSize = 128;

/// check_flux_components() on parsed configs.
void check_flux_fit(const FluxTransformerConfig& t, const CLIPTextConfig& clip, const T5Config& t5,
               const AutoencoderKLConfig& vae) {
  auto mismatch = [](const std::string& what) {
    throw InputError("transformer config: " + what + "; the components do not belong together");
  };
  if (t.joint_attention_dim != t5.d_model)
    mismatch("joint_attention_dim " + std::to_string(t.joint_attention_dim) + " is not text_encoder_2's (T5) d_model " +
             std::to_string(t5.d_model));
  if (t.pooled_projection_dim != clip.hidden_size)
    mismatch("pooled_projection_dim " + std::to_string(t.pooled_projection_dim) +
             " is not text_encoder's (CLIP) hidden_size " + std::to_string(clip.hidden_size));
  if (t.in_channels != 4 * vae.latent_channels || t.out_features() != t.in_channels)
    mismatch("in_channels " + std::to_string(t.in_channels) + " and patch_size^2 * out_channels " +
             std::to_string(t.out_features()) + " must both be 4 * the VAE's latent_channels (" +
             std::to_string(4 * vae.latent_channels) + ")");
  if (!vae.shift_factor)
    throw InputError("vae config: shift_factor is missing or null, and FluxPipeline decodes latents / "
                     "scaling_factor + shift_factor; the VAE is not FLUX.1's");
}

class FluxPipeline : public LoraPipeline {
 public:
  FluxPipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family),
        dtype_(parse_dtype(r.dtype)),
        device_(r.device),
        transformer_config_(FluxTransformerConfig::from_json(md.at("transformer").config)),
        vae_config_(AutoencoderKLConfig::from_json(md.at("vae").config)),
        scheduler_config_(md.at("scheduler").config) {
    const T5Config t5 = T5Config::from_json(md.at("text_encoder_2").config);
    check_flux_fit(transformer_config_, CLIPTextConfig::from_json(md.at("text_encoder").config), t5, vae_config_);
    const Component& tok = md.at("tokenizer");
    const Component& tok2 = md.at("tokenizer_2");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);
    tokenizer_2_ = find_tokenizer_class(tok2.class_name)->load(tok2.path);
    check_t5_tokenizer_fits(*tokenizer_2_, t5, "tokenizer_2", "text_encoder_2");

    const json settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});
    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // FluxLoraLoaderMixin._lora_loadable_modules: the transformer and CLIP (not T5).
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/true);
    load_text_encoder(md, "text_encoder_2", text_encoder_2_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    load_vae(md, "vae", vae_, options);
    vae_->set_tiling(r.vae_tiling);  // diffusers: pipe.vae.enable_tiling()
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, flux_default_size(md));
    // check_inputs: height and width should be multiples of vae_scale_factor * 2 (16 for FLUX.1).
    info_.size_multiple = static_cast<int>(2 * vae_config_.scale_factor());
    // A transformer without guidance embeds is FLUX.1-schnell-like: timestep-distilled for 1 to 4 steps,
    // with no guidance input. diffusers' __call__ defaults (28 steps, guidance 3.5) are the same for
    // every FluxPipeline, so a schnell user who passes nothing runs 7 times the steps the model was
    // distilled for; dpinfer defaults it to BFL's reference 4 steps and records guidance 0 (ignored).
    if (!transformer_config_.guidance_embeds) {
      info_.default_steps = 4;
      info_.default_guidance_scale = 0.0;
    }
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    const int64_t factor = vae_config_.scale_factor();
    const json settings = batch_settings(batch);
    const double true_cfg_scale = settings["true_cfg_scale"].get<double>();
    // FluxPipeline runs the prompt under cache_context("cond") and true CFG's negative under "uncond": a
    // First Block Cache state each, for this batch (diffusers resets them at the end of every call).
    const double fbc_threshold = settings["first_block_cache"].get<double>();
    std::optional<nn::FirstBlockCache> cond_cache, uncond_cache;
    if (fbc_threshold > 0) {
      cond_cache.emplace(fbc_threshold);
      uncond_cache.emplace(fbc_threshold);
    }
    use_loras(batch);
    c10::InferenceMode guard;
    const int64_t b = static_cast<int64_t>(batch.size());
    const std::vector<int64_t> cfg_rows = true_cfg_rows(batch, true_cfg_scale);
    const auto [cond, uncond] = embeds(batch, settings);
    denoiser_phase();
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    const at::Tensor text_ids = at::zeros({cond.t5.size(1), 3}, options);  // encode_prompt: zeros (L, 3)

    const int64_t h = 2 * (first.height / (factor * 2)), w = 2 * (first.width / (factor * 2));
    const at::Tensor image_ids = latent_image_ids(h / 2, w / 2, options);
    TimestepRequest steps;
    steps.sigmas = flow_match_linear_sigmas(first.steps);
    steps.mu = calculate_shift((h / 2) * (w / 2), scheduler_config_);  // image_seq_len
    scheduler_->set_timesteps(steps);
    const at::Tensor timesteps = scheduler_->timesteps();
    const int64_t begin = first.image ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);

    at::Tensor latents;  // [B, (h/2)(w/2), 4C]
    std::vector<at::Generator> generators;
    // Inpainting (FluxInpaintPipeline): the packed image latents, noise and mask that each step blends back.
    at::Tensor inpaint_image, inpaint_noise, inpaint_mask;
    if (first.image) {
      // Ref: FluxImg2ImgPipeline.prepare_latents (FluxInpaintPipeline's is the same): each image encoded alone
      // with its generator, (z - shift_factor) * scaling_factor, then scale_noise to the first step's sigma, packed.
      vae_phase();  // --offload model: the VAE to the device to encode
      ImageStart start = flow_image_start(batch, *vae_, vae_config_, dtype_, device_);
      denoiser_phase();
      latents = pack_latents(scheduler_->add_noise(start.image_latents, start.noise, begin));
      generators = std::move(start.generators);
      if (first.mask) {
        // prepare_mask_latents: the mask binarized, F.interpolate'd (nearest) to the latents, repeated over the
        // channels and packed. It also encodes the masked image, which FLUX.1's own transformer does not take: the
        // draw only moves each generator on, and nothing draws from them after it here (flow matching steps
        // without noise), so it is skipped.
        inpaint_mask =
            pack_latents(latent_masks(batch, h, w).to(device_, dtype_).repeat({1, vae_config_.latent_channels, 1, 1}));
        inpaint_image = pack_latents(start.image_latents);
        inpaint_noise = pack_latents(start.noise);
      }
    } else {
      // prepare_latents: [B, C, h, w] noise from each image's generator in the prompt dtype, packed.
      BatchNoise noise = batch_noise(batch, vae_config_.latent_channels, h, w, dtype_, device_);
      latents = pack_latents(noise.noise);
      generators = std::move(noise.generators);
    }
    // guidance = full([1], guidance_scale, float32).expand(B), only for a guidance-distilled transformer
    at::Tensor guidance;
    if (transformer_config_.guidance_embeds)
      guidance = at::full({1}, first.guidance_scale, at::TensorOptions().dtype(at::kFloat).device(device_)).expand({b});
    at::Tensor rows;
    if (!cfg_rows.empty() && static_cast<int64_t>(cfg_rows.size()) < b) rows = at::tensor(cfg_rows, at::kLong).to(device_);

    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // timestep = t.expand(B).to(latents.dtype), passed as timestep / 1000 in that dtype
      const at::Tensor timestep = timesteps[begin + i].to(device_).expand({b}).to(latents.scalar_type()) / 1000;
      at::Tensor pred = transformer_->forward(latents, cond.t5, cond.pooled, timestep, image_ids, text_ids, guidance,
                                              cond_cache ? &*cond_cache : nullptr);
      if (!cfg_rows.empty()) {
        auto pick = [&](const at::Tensor& t) { return rows.defined() ? t.index_select(0, rows) : t; };
        const at::Tensor neg =
            transformer_->forward(pick(latents), uncond.t5, uncond.pooled, pick(timestep), image_ids, text_ids,
                                  guidance.defined() ? pick(guidance) : guidance, uncond_cache ? &*uncond_cache : nullptr);
        const at::Tensor pos = pick(pred);
        const at::Tensor guided_pred = neg + true_cfg_scale * (pos - neg);
        pred = rows.defined() ? pred.index_copy(0, rows, guided_pred) : guided_pred;
      }
      latents = scheduler_->step(pred, i, latents, generators);
      if (inpaint_mask.defined())
        latents = blend_kept_region(*scheduler_, latents, inpaint_image, inpaint_noise, inpaint_mask, begin + i + 1);
    }
    if (cond_cache) {  // the images of this batch, for the run summary
      cond_cache->count_into(statistics_);
      uncond_cache->count_into(statistics_);
    }
    throw_if_cancelled();

    // latents / scaling_factor + shift_factor, in the VAE's dtype
    at::Tensor z = unpack_latents(latents, h, w).to(dtype_);
    z = z / vae_config_.scaling_factor + *vae_config_.shift_factor;
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W] in about [-1, 1]
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override { embeds(batch, batch_settings(batch)); }

 private:
  /// One side (prompts or negative prompts) of a batch as the transformer takes it.
  struct Conditioning {
    at::Tensor t5;      ///< [B, max_sequence_length, d_model]: T5's last hidden state
    at::Tensor pooled;  ///< [B, hidden]: CLIP's pooled output
  };

  /// The batch's settings, after the size check.
  json batch_settings(const std::vector<ImageRequest>& batch) const {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.scale_factor());
    return resolve_settings(info_.setting_specs, batch.front().settings, "image settings", family_.label);
  }

  /// do_true_cfg: true_cfg_scale > 1 and a negative prompt (dpinfer's empty one is diffusers' None),
  /// decided per image so that an image never depends on its batch-mates: the rows that have it.
  static std::vector<int64_t> true_cfg_rows(const std::vector<ImageRequest>& batch, double true_cfg_scale) {
    std::vector<int64_t> rows;
    for (size_t i = 0; i < batch.size(); ++i)
      if (true_cfg_scale > 1.0 && !batch[i].negative_prompt.empty()) rows.push_back(static_cast<int64_t>(i));
    return rows;
  }

  /// The prompts' conditioning, and the negative prompts' of true_cfg_rows() (undefined when none).
  std::pair<Conditioning, Conditioning> embeds(const std::vector<ImageRequest>& batch, const json& settings) {
    const int max_sequence_length = static_cast<int>(settings["max_sequence_length"].get<int64_t>());
    std::vector<std::string> prompts, negatives;
    for (const ImageRequest& r : batch) prompts.push_back(r.prompt);
    for (int64_t i : true_cfg_rows(batch, settings["true_cfg_scale"].get<double>()))
      negatives.push_back(batch[static_cast<size_t>(i)].negative_prompt);
    Conditioning cond = encode(prompts, max_sequence_length, /*negative=*/false);
    if (negatives.empty()) return {cond, Conditioning{}};
    return {cond, encode(negatives, max_sequence_length, /*negative=*/true)};
  }

  /// encode_prompt for `texts`: CLIP's pooler_output of the text padded to 77 tokens, and T5's
  /// last_hidden_state of the text padded to max_sequence_length with no mask; each text in its own
  /// call, through the cache. Every text is padded to the same length, so an image's conditioning
  /// does not depend on its batch-mates.
  Conditioning encode(const std::vector<std::string>& texts, int max_sequence_length, bool negative) {
    // The side is in the key only so that a truncation warning names the right one. The LoRAs
    // merged into CLIP change its output (T5 takes none): they key the entries too.
    const std::string key = std::string(negative ? "negative" : "prompt") +
                            " max_sequence_length=" + std::to_string(max_sequence_length) +
                            " loras=" + lora_key("text_encoder");
    std::vector<at::Tensor> t5_rows, pooled_rows;
    for (std::vector<at::Tensor>& e : embeddings_.each(texts, key, [&](const std::string& text) {
           encoder_phase();
           auto [t5, pooled] = encode_one(text, max_sequence_length, negative);
           return std::vector<at::Tensor>{t5, pooled};
         })) {
      t5_rows.push_back(e[0]);
      pooled_rows.push_back(e[1]);
    }
    return {at::cat(t5_rows), at::cat(pooled_rows)};
  }

  std::pair<at::Tensor, at::Tensor> encode_one(const std::string& text, int max_sequence_length, bool negative) {
    // _get_clip_prompt_embeds: tokenizer_max_length (77) with max_length padding, pooler_output.
    const int clip_length = tokenizer_->model_max_length();
    const Encoding clip = tokenizer_->encode(text, clip_length);
    warn_truncated(text, negative, clip.dropped_tokens, clip_length, "CLIP");
    const at::Tensor clip_ids = at::tensor(clip.ids, at::kLong).view({1, -1}).to(device_);
    const at::Tensor pooled = text_encoder_->forward(clip_ids).pooler_output.to(dtype_);  // [1, hidden]
    // _get_t5_prompt_embeds: max_sequence_length with max_length padding, no attention mask.
    const at::Tensor t5 =
        t5_prompt_embeds(*text_encoder_2_, *tokenizer_2_, {text}, max_sequence_length, negative, device_, dtype_);
    return {t5, pooled};  // [1, L, d_model], [1, hidden]
  }

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  FluxTransformerConfig transformer_config_;
  AutoencoderKLConfig vae_config_;
  json scheduler_config_;
  std::unique_ptr<Tokenizer> tokenizer_, tokenizer_2_;
  std::unique_ptr<Scheduler> scheduler_;
  // Each null while two-phase chunks release it.
  std::shared_ptr<CLIPTextModelImpl> text_encoder_;
  std::shared_ptr<T5EncoderModelImpl> text_encoder_2_;
  std::shared_ptr<FluxTransformer2DModelImpl> transformer_;
  std::shared_ptr<AutoencoderKLImpl> vae_;
  PipelineInfo info_;
  json statistics_ = json::object();  ///< statistics(): First Block Cache's counts over the run
};

}  // namespace

std::array<int64_t, 2> flux_default_size(const ModelDir& model) {
  const int64_t side = kFluxDefaultSampleSize * AutoencoderKLConfig::from_json(model.at("vae").config).scale_factor();
  return {side, side};
}

void check_flux_components(const ModelDir& md) {
  const T5Config t5 = T5Config::from_json(md.at("text_encoder_2").config);
  check_flux_fit(FluxTransformerConfig::from_json(md.at("transformer").config),
            CLIPTextConfig::from_json(md.at("text_encoder").config), t5,
            AutoencoderKLConfig::from_json(md.at("vae").config));
  const Component& tok2 = md.at("tokenizer_2");
  check_t5_tokenizer_fits(*find_tokenizer_class(tok2.class_name)->load(tok2.path), t5, "tokenizer_2", "text_encoder_2");
}

std::unique_ptr<TextToImage> load_flux(const ModelDir& model, const LoadRequest& request, const Family& family) {
  return std::make_unique<FluxPipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

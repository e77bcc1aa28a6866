// Ref: diffusers/pipelines/flux/pipeline_flux.py FluxPipeline (diffusers 0.36.0): _get_clip_prompt_embeds,
// _get_t5_prompt_embeds, encode_prompt, _prepare_latent_image_ids, _pack_latents, _unpack_latents,
// prepare_latents and __call__. tools/fixtures/make_flux_pipelines.py records its goldens.
// FLUX.1 Kontext (a folder whose model_index.json names FluxKontextPipeline): pipeline_flux_kontext.py's
// __call__ (the reference image's size, step 3), prepare_latents and _encode_vae_image, recorded by
// tools/fixtures/make_kontext_pipelines.py. FLUX.1 Fill (FluxFillPipeline): pipeline_flux_fill.py's prepare_latents,
// prepare_mask_latents and __call__, recorded by tools/fixtures/make_flux_fill_pipelines.py.
#include "dpinfer/pipeline/families/flux.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "block_caches.h"
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
#include "dpinfer/pipeline/nn/cuda_graphs.h"
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

/// diffusers' PREFERRED_KONTEXT_RESOLUTIONS (pipeline_flux_kontext.py), {width, height}: the sizes FLUX.1
/// Kontext was trained at, about 1 MP each, in diffusers' order (which breaks ties, see reference_size()).
constexpr std::array<std::array<int, 2>, 17> kKontextResolutions{{{672, 1568}, {688, 1504}, {720, 1456}, {752, 1392},
                                                                  {800, 1328}, {832, 1248}, {880, 1184}, {944, 1104},
                                                                  {1024, 1024}, {1104, 944}, {1184, 880}, {1248, 832},
                                                                  {1328, 800}, {1392, 752}, {1456, 720}, {1504, 688},
                                                                  {1568, 672}}};

/// FluxKontextPipeline's _auto_resize, as a setting of Kontext models only (diffusers has it as a private
/// call argument, on by default).
SettingSpec kontext_auto_resize() {
  return {"auto_resize", SettingSpec::Type::kBoolean, true, 0, 0,
          "FLUX.1 Kontext only: resize the input image to the trained resolution nearest its aspect ratio (672x1568 "
          "to 1568x672, about 1 MP), as FluxKontextPipeline does by default; false keeps the image's own size, "
          "rounded down to a multiple of 16",
          "Kontext auto resize", 0};
}

/// check_flux_components() on parsed configs. `fill`: the pipeline is FluxFillPipeline, whose transformer takes the
/// packed latents, masked-image latents and mask (FLUX.1-Fill-dev: 64 + 64 + 256 = 384 in, 64 out).
void check_flux_fit(const FluxTransformerConfig& t, const CLIPTextConfig& clip, const T5Config& t5,
                    const AutoencoderKLConfig& vae, bool fill) {
  auto mismatch = [](const std::string& what) {
    throw InputError("transformer config: " + what + "; the components do not belong together");
  };
  if (t.joint_attention_dim != t5.d_model)
    mismatch("joint_attention_dim " + std::to_string(t.joint_attention_dim) + " is not text_encoder_2's (T5) d_model " +
             std::to_string(t5.d_model));
  if (t.pooled_projection_dim != clip.hidden_size)
    mismatch("pooled_projection_dim " + std::to_string(t.pooled_projection_dim) +
             " is not text_encoder's (CLIP) hidden_size " + std::to_string(clip.hidden_size));
  const int64_t packed = 4 * vae.latent_channels;
  const int64_t fill_in = 2 * packed + 4 * vae.scale_factor() * vae.scale_factor();
  if (fill && (t.in_channels != fill_in || t.out_features() != packed))
    mismatch("in_channels " + std::to_string(t.in_channels) + " and patch_size^2 * out_channels " +
             std::to_string(t.out_features()) + " must be " + std::to_string(fill_in) + " and " + std::to_string(packed) +
             " for FluxFillPipeline (the packed latents, masked-image latents and mask in, the latents out)");
  if (!fill) check_packed_channels(t.in_channels, t.out_features(), vae);
  check_vae_shift_factor(vae, "FluxPipeline");
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
    const std::string pipeline_class = md.model_index.value("_class_name", std::string());
    kontext_ = pipeline_class == "FluxKontextPipeline";
    fill_ = pipeline_class == "FluxFillPipeline";
    check_flux_fit(transformer_config_, CLIPTextConfig::from_json(md.at("text_encoder").config), t5, vae_config_, fill_);
    const Component& tok = md.at("tokenizer");
    const Component& tok2 = md.at("tokenizer_2");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);
    tokenizer_2_ = find_tokenizer_class(tok2.class_name)->load(tok2.path);
    check_t5_tokenizer_fits(*tokenizer_2_, t5, "tokenizer_2", "text_encoder_2");

    std::vector<SettingSpec> specs = family_.settings;
    if (kontext_) specs.push_back(kontext_auto_resize());
    const json settings = resolve_settings(specs, r.settings, "--set", family_.label);
    check_settings(settings);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});
    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // FluxLoraLoaderMixin._lora_loadable_modules: the transformer and CLIP (not T5).
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/true);
    load_text_encoder(md, "text_encoder_2", text_encoder_2_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    if (r.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
    load_vae(md, "vae", vae_, options, r.vae_tiling);  // with diffusers' pipe.vae.enable_tiling() as asked
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, flux_default_size(md));
    info_.setting_specs = specs;
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
    if (fill_) {
      // FluxFillPipeline (FLUX.1 Fill): every item repaints the mask's white of its image; __call__'s defaults are
      // 50 steps, guidance 30 and strength 1.0.
      info_.requires_mask = true;
      info_.default_steps = 50;
      info_.default_guidance_scale = 30.0;
      info_.default_strength = 1.0;
      info_.default_inpaint_strength = 1.0;
    }
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }

  void check_settings(const json& settings) const override {
    // FluxKontextPipeline.__call__ opens no cache_context, which diffusers' First Block Cache needs.
    if (kontext_ && settings.value("first_block_cache", 0.0) > 0)
      throw InputError("first_block_cache: FLUX.1 Kontext models (FluxKontextPipeline) run without First Block Cache, "
                       "as diffusers' does; drop it");
    // cache-dit's adapter serves every FluxPipeline class, Kontext's and Fill's too.
    check_block_cache_settings(settings, transformer_config_.num_layers + transformer_config_.num_single_layers);
  }

  // Ref: FluxKontextPipeline.__call__, step 3 (Preprocess image).
  ReferenceSize reference_size(int width, int height, const json& settings) const override {
    // get_default_height_width rounds the image's size down to the image processor's multiple, which is
    // also the pipeline's multiple_of: vae_scale_factor * 2.
    const int multiple = static_cast<int>(2 * vae_config_.scale_factor());
    int w = width - width % multiple, h = height - height % multiple;
    if (w <= 0 || h <= 0)
      throw InputError("the input image is " + std::to_string(width) + "x" + std::to_string(height) +
                       ", smaller than FLUX.1 Kontext's multiple of " + std::to_string(multiple) +
                       " pixels in a side; give a larger image");
    if (settings.value("auto_resize", true)) {
      // min((abs(aspect_ratio - w / h), w, h) for w, h in PREFERRED_KONTEXT_RESOLUTIONS): Python compares the
      // tuples, so an equal distance goes to the smaller width, then height.
      const double aspect_ratio = static_cast<double>(w) / h;
      std::array<int, 2> best{};
      double best_distance = 0;
      for (const std::array<int, 2>& r : kKontextResolutions) {
        const double d = std::abs(aspect_ratio - static_cast<double>(r[0]) / r[1]);
        if (best[0] == 0 || d < best_distance || (d == best_distance && r < best)) {
          best = r;
          best_distance = d;
        }
      }
      w = best[0];
      h = best[1];
    }
    const std::array<int, 2> size{w / multiple * multiple, h / multiple * multiple};
    return {size, size};  // resized to it, nothing cut
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    if (kontext_)
      return generate_by_reference_size(batch, [this](const std::vector<ImageRequest>& part) {
        return generate_one_size(part);
      });
    return generate_one_size(batch);
  }

 private:
  /// generate() for a batch whose references, if any, are of one size.
  std::vector<RgbImage> generate_one_size(const std::vector<ImageRequest>& batch) {
    const ImageRequest& first = batch.front();
    if (kontext_ && first.mask)
      throw InputError("a mask for a FLUX.1 Kontext model, which takes its image as a reference to edit; drop the mask");
    const bool reference = kontext_ && first.image != nullptr;
    const int64_t factor = vae_config_.scale_factor();
    const json settings = batch_settings(batch);
    const double true_cfg_scale = settings["true_cfg_scale"].get<double>();
    // FluxPipeline runs the prompt under cache_context("cond") and true CFG's negative under "uncond": a step cache
    // state each, for this batch (diffusers and cache-dit reset theirs at every call).
    const BlockCaches caches(settings);
    nn::check_no_step_cache(graphs_.get(), caches.cond() || caches.uncond());
    use_loras(batch);
    c10::InferenceMode guard;
    const int64_t b = static_cast<int64_t>(batch.size());
    const std::vector<int64_t> cfg_rows = true_cfg_rows(batch, true_cfg_scale);
    const auto [cond, uncond] = embeds(batch, settings);
    denoiser_phase();
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    const at::Tensor text_ids = at::zeros({cond.t5.size(1), 3}, options);  // encode_prompt: zeros (L, 3)

    const int64_t h = 2 * (first.height / (factor * 2)), w = 2 * (first.width / (factor * 2));
    at::Tensor image_ids = latent_image_ids(h / 2, w / 2, options);
    TimestepRequest steps;
    steps.sigmas = flow_match_linear_sigmas(first.steps);
    steps.mu = calculate_shift((h / 2) * (w / 2), scheduler_config_);  // image_seq_len
    scheduler_->set_timesteps(steps);
    const at::Tensor timesteps = scheduler_->timesteps();
    const int64_t begin =
        first.image && !reference ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);

    at::Tensor latents;  // [B, (h/2)(w/2), 4C]
    std::vector<at::Generator> generators;
    // Inpainting (FluxInpaintPipeline): the packed image latents, noise and mask that each step blends back.
    PackedInpainting inpaint;
    at::Tensor fill_condition;  // FluxFillPipeline: [B, L, 4C + 4 vae_scale_factor^2], after the latents' channels
    if (first.image && !reference) {
      // Ref: FluxImg2ImgPipeline.prepare_latents (FluxInpaintPipeline's is the same): each image encoded alone
      // with its generator, (z - shift_factor) * scaling_factor, then scale_noise to the first step's sigma, packed.
      vae_phase();  // --offload model: the VAE to the device to encode
      ImageStart start = flow_image_start(batch, *vae_, vae_config_, dtype_, device_);
      latents = pack_latents(scheduler_->add_noise(start.image_latents, start.noise, begin));
      generators = std::move(start.generators);
      if (fill_) fill_condition = fill_conditioning(batch, generators, h, w);  // encodes too
      denoiser_phase();
      // FLUX.1's own transformer does not take the masked image's latents (FLUX.1 Fill's does, above).
      if (!fill_ && first.mask) inpaint = packed_inpainting(batch, start, h, w, options);
    } else {
      // prepare_latents: [B, C, h, w] noise from each image's generator in the prompt dtype, packed.
      BatchNoise noise = batch_noise(batch, vae_config_.latent_channels, h, w, dtype_, device_);
      latents = pack_latents(noise.noise);
      generators = std::move(noise.generators);
    }
    // Kontext's reference (FluxKontextPipeline.prepare_latents): each image encoded alone, _encode_vae_image's
    // retrieve_latents(sample_mode="argmax"), the mean, which draws nothing from the generator; then
    // (z - shift_factor) * scaling_factor, packed [B, Lr, 4C] to follow the latents in the sequence, with the
    // latents' kind of ids but 1 in their first column.
    at::Tensor reference_latents;
    if (reference) {
      std::vector<at::Tensor> means;
      vae_phase();  // --offload model: the VAE to the device to encode
      for (const ImageRequest& r : batch) means.push_back(vae_->encode(vae_input(*r.image, dtype_, device_)).mean);
      denoiser_phase();
      const at::Tensor z = (at::cat(means) - *vae_config_.shift_factor) * vae_config_.scaling_factor;
      reference_latents = pack_latents(z);
      at::Tensor reference_ids = latent_image_ids(z.size(2) / 2, z.size(3) / 2, options);
      reference_ids.select(1, 0).fill_(1);
      image_ids = at::cat({image_ids, reference_ids});  // torch.cat([latent_ids, image_ids], dim=0)
    }
    // guidance = full([1], guidance_scale, float32).expand(B), only for a guidance-distilled transformer
    at::Tensor guidance;
    if (transformer_config_.guidance_embeds)
      guidance = at::full({1}, first.guidance_scale, at::TensorOptions().dtype(at::kFloat).device(device_)).expand({b});
    at::Tensor rows;
    if (!cfg_rows.empty() && static_cast<int64_t>(cfg_rows.size()) < b) rows = at::tensor(cfg_rows, at::kLong).to(device_);

    // --cuda-graphs: where the transformer's weights are for this batch's calls (two-phase chunks may have
    // brought it back elsewhere since the last batch).
    const uint64_t weights = nn::denoiser_weights(graphs_.get(), *transformer_);
    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // timestep = t.expand(B).to(latents.dtype), passed as timestep / 1000 in that dtype
      const at::Tensor timestep = timesteps[begin + i].to(device_).expand({b}).to(latents.scalar_type()) / 1000;
      // Kontext: the reference's tokens after the latents', and the prediction for the latents' only
      // (noise_pred[:, : latents.size(1)]).
      // Fill: the masked image's latents and the mask beside the latents' channels (torch.cat(..., dim=2)).
      const at::Tensor input = reference ? at::cat({latents, reference_latents}, 1)
                               : fill_condition.defined() ? at::cat({latents, fill_condition}, 2)
                                                          : latents;
      const int64_t length = latents.size(1);
      // One transformer call: eager, or replayed from its CUDA graph (--cuda-graphs; the same kernels).
      const auto transformer = [&](const at::Tensor& in, const auto& embeds, const at::Tensor& t, const at::Tensor& g,
                                   nn::BlockCache* cache, const char* context) {
        return nn::run_denoiser(graphs_.get(), {in, embeds.t5, embeds.pooled, t, image_ids, text_ids, g},
                                std::string(context) + "/" + lora_key("transformer"), weights,
                                [&](const std::vector<at::Tensor>& v) {
                                  return transformer_->forward(v[0], v[1], v[2], v[3], v[4], v[5], v[6], cache);
                                });
      };
      at::Tensor pred = transformer(input, cond, timestep, guidance, caches.cond(), "cond").slice(1, 0, length);
      if (!cfg_rows.empty()) {
        auto pick = [&](const at::Tensor& t) { return rows.defined() ? t.index_select(0, rows) : t; };
        const at::Tensor neg = transformer(pick(input), uncond, pick(timestep),
                                           guidance.defined() ? pick(guidance) : guidance, caches.uncond(), "uncond")
                                   .slice(1, 0, length);
        const at::Tensor pos = pick(pred);
        const at::Tensor guided_pred = neg + true_cfg_scale * (pos - neg);
        pred = rows.defined() ? pred.index_copy(0, rows, guided_pred) : guided_pred;
      }
      latents = scheduler_->step(pred, i, latents, generators);
      if (inpaint.mask.defined())
        latents = blend_kept_region(*scheduler_, latents, inpaint.image, inpaint.noise, inpaint.mask, begin + i + 1);
    }
    caches.count_into(statistics_);  // the images of this batch, for the run summary
    nn::count_graphs_into(graphs_.get(), statistics_);
    throw_if_cancelled();

    const at::Tensor z = packed_latents_for_decode(latents, h, w, vae_config_, dtype_);
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W] in about [-1, 1]
  }

  void encode_prompts(const std::vector<ImageRequest>& batch) override { embeds(batch, batch_settings(batch)); }

  /// FluxFillPipeline.prepare_mask_latents, per image (h x w: the latents' size): the masked image,
  /// init_image * (1 - mask) in float32 then the run dtype, encoded with a sample drawn from the image's
  /// generator (after its image latents and noise, as diffusers draws them), (z - shift_factor) * scaling_factor
  /// and packed; beside it, the binary mask at the image's resolution folded into vae_scale_factor^2 channels per
  /// latent pixel ([1, s^2, h, w]) and packed. Returns [B, (h/2)(w/2), 4C + 4 s^2] in the run dtype.
  at::Tensor fill_conditioning(const std::vector<ImageRequest>& batch, std::vector<at::Generator>& generators,
                               int64_t h, int64_t w) {
    const int64_t s = vae_config_.scale_factor();
    std::vector<at::Tensor> rows;
    for (size_t i = 0; i < batch.size(); ++i) {
      const ImageRequest& r = batch[i];
      if (!r.mask) throw InputError("FLUX.1 Fill: every item of the batch needs a mask");
      const at::Tensor mask = binary_mask(*r.mask).to(device_);  // [1, 1, H, W] float32
      const at::Tensor masked = (vae_input(*r.image, at::kFloat, device_) * (1 - mask)).to(dtype_);
      const at::Tensor z =
          (sample_latent(vae_->encode(masked), generators[i]) - *vae_config_.shift_factor) * vae_config_.scaling_factor;
      const at::Tensor folded =
          mask.select(1, 0).view({1, h, s, w, s}).permute({0, 2, 4, 1, 3}).reshape({1, s * s, h, w});
      rows.push_back(at::cat({pack_latents(z.to(device_, dtype_)), pack_latents(folded).to(device_, dtype_)}, -1));
    }
    return at::cat(rows);
  }

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
  bool kontext_ = false;  ///< model_index.json names FluxKontextPipeline
  bool fill_ = false;     ///< model_index.json names FluxFillPipeline
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
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
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
                 AutoencoderKLConfig::from_json(md.at("vae").config),
                 md.model_index.value("_class_name", std::string()) == "FluxFillPipeline");
  const Component& tok2 = md.at("tokenizer_2");
  check_t5_tokenizer_fits(*find_tokenizer_class(tok2.class_name)->load(tok2.path), t5, "tokenizer_2", "text_encoder_2");
}

int64_t kontext_reference_max_pixels() {
  int64_t most = 0;
  for (const std::array<int, 2>& r : kKontextResolutions) most = std::max(most, int64_t{r[0]} * r[1]);
  return most;
}

ReferenceFacts flux_reference_facts(const std::string& pipeline_class, const nlohmann::json& settings,
                                    int64_t item_pixels) {
  if (pipeline_class != "FluxKontextPipeline") return {};
  // An input image is the reference Kontext edits: no strength, no mask (FluxKontextInpaintPipeline is another
  // pipeline, which dpinfer does not run). Its output keeps the default size, and the prompt is T5's and CLIP's alone.
  ReferenceFacts facts;
  facts.references = true;
  const bool auto_resize = !settings.contains("auto_resize") || settings["auto_resize"] != false;
  facts.max_pixels = auto_resize ? kontext_reference_max_pixels() : item_pixels;
  return facts;
}

std::unique_ptr<TextToImage> load_flux(const ModelDir& model, const LoadRequest& request, const Family& family) {
  return std::make_unique<FluxPipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

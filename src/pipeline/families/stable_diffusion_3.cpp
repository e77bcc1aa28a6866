// Ref: diffusers/pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py StableDiffusion3Pipeline
// (diffusers 0.36.0). tools/fixtures/make_sd3_pipelines.py records its goldens.
#include "dpinfer/pipeline/families/stable_diffusion_3.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "block_caches.h"
#include "denoising.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/models/text_encoders/t5_config.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/models/transformers/sd3_transformer.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "lora_pipeline.h"
#include "pipeline_info.h"
#include "t5_prompt.h"

namespace dpinfer::pipeline {

std::array<int64_t, 2> stable_diffusion_3_default_size(const ModelDir& model) {
  // default_sample_size * vae_scale_factor
  const int64_t side = SD3TransformerConfig::from_json(model.at("transformer").config).sample_size *
                       AutoencoderKLConfig::from_json(model.at("vae").config).scale_factor();
  return {side, side};
}

namespace {

using nlohmann::json;

std::unique_ptr<Tokenizer> load_tokenizer(const ModelDir& md, const char* name) {
  const Component& tok = md.at(name);
  return find_tokenizer_class(tok.class_name)->load(tok.path);
}

/// Whether the model has T5: text_encoder_3 and tokenizer_3 both, or neither (diffusers' text_encoder_3=None,
/// whose states are zeros). One without the other is refused: diffusers would fail on the first prompt.
bool has_t5(const ModelDir& md) {
  const bool encoder = md.find("text_encoder_3") != nullptr, tokenizer = md.find("tokenizer_3") != nullptr;
  if (encoder != tokenizer)
    throw InputError(std::string("model_index.json: ") + (encoder ? "text_encoder_3" : "tokenizer_3") +
                     " (T5) is set but " + (encoder ? "tokenizer_3" : "text_encoder_3") +
                     " is missing or null; give both, or set both to [null, null] to run without T5");
  return encoder;
}

/// The optional T5 pair's config and tokenizer: both set, or both empty without T5.
struct T5Parts {
  std::optional<T5Config> config;
  std::unique_ptr<Tokenizer> tokenizer;
};

T5Parts load_t5_parts(const ModelDir& md) {
  T5Parts t5;
  if (has_t5(md)) {
    t5.config = T5Config::from_json(md.at("text_encoder_3").config);
    t5.tokenizer = load_tokenizer(md, "tokenizer_3");
  }
  return t5;
}

/// check_stable_diffusion_3_components() on parsed configs and loaded tokenizers.
void check_sd3_fit(const SD3TransformerConfig& tc, const CLIPTextConfig& te1, const CLIPTextConfig& te2,
               const AutoencoderKLConfig& vae, const Tokenizer& tok1, const Tokenizer& tok2, const T5Parts& t5) {
  // encode_prompt pads the CLIP states to T5's width and concatenates them with T5's along the sequence;
  // the transformer's context_embedder takes joint_attention_dim channels.
  if (t5.config && t5.config->d_model != tc.joint_attention_dim)
    throw InputError("transformer config: joint_attention_dim " + std::to_string(tc.joint_attention_dim) +
                     " is not text_encoder_3's (T5) d_model " + std::to_string(t5.config->d_model) +
                     "; the components do not belong together");
  if (t5.config) check_t5_tokenizer_fits(*t5.tokenizer, *t5.config, "tokenizer_3", "text_encoder_3");
  if (tc.in_channels != vae.latent_channels)
    throw InputError("transformer config: in_channels " + std::to_string(tc.in_channels) +
                     " is not the VAE's latent_channels " + std::to_string(vae.latent_channels) +
                     "; the components do not belong together");
  if (tc.pooled_projection_dim != te1.projection_dim + te2.projection_dim)
    throw InputError("transformer config: pooled_projection_dim " + std::to_string(tc.pooled_projection_dim) +
                     " is not the text encoders' projection_dim together (" + std::to_string(te1.projection_dim) +
                     " + " + std::to_string(te2.projection_dim) + "); the components do not belong together");
  if (!vae.shift_factor)
    throw InputError("vae config: shift_factor is missing or null, and StableDiffusion3Pipeline decodes latents / "
                     "scaling_factor + shift_factor; the VAE is not SD3's");
  // Both CLIPs are tokenized to tokenizer's model_max_length (the pipeline's tokenizer_max_length).
  const int max_length = tok1.model_max_length();
  for (const auto& [name, te] : {std::pair{"text_encoder", &te1}, std::pair{"text_encoder_2", &te2}})
    if (max_length > te->max_position_embeddings)
      throw InputError(std::string("tokenizer: model_max_length ") + std::to_string(max_length) + " is more than " +
                       name + "'s max_position_embeddings " + std::to_string(te->max_position_embeddings) +
                       "; the components do not belong together");
  for (const auto& [name, tok, te] : {std::tuple{"tokenizer", &tok1, &te1}, std::tuple{"tokenizer_2", &tok2, &te2}})
    if (static_cast<int64_t>(tok->vocab_size()) > te->vocab_size)
      throw InputError(std::string(name) + ": " + std::to_string(tok->vocab_size()) +
                       " tokens, more than its text encoder's vocab_size " + std::to_string(te->vocab_size) +
                       "; the components do not belong together");
}

/// One side (positive or negative) of a batch's prompt embeddings.
struct Sd3PromptEmbeds {
  at::Tensor hidden;  ///< [B, 77 + max_sequence_length, joint_attention_dim]
  at::Tensor pooled;  ///< [B, pooled_projection_dim]
};

class StableDiffusion3Pipeline : public LoraPipeline {
 public:
  StableDiffusion3Pipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family),
        dtype_(parse_dtype(r.dtype)),
        device_(r.device),
        transformer_config_(SD3TransformerConfig::from_json(md.at("transformer").config)),
        vae_config_(AutoencoderKLConfig::from_json(md.at("vae").config)),
        scheduler_config_(md.at("scheduler").config) {
    const CLIPTextConfig te1 = CLIPTextConfig::from_json(md.at("text_encoder").config);
    const CLIPTextConfig te2 = CLIPTextConfig::from_json(md.at("text_encoder_2").config);
    tokenizers_.push_back(load_tokenizer(md, "tokenizer"));
    tokenizers_.push_back(load_tokenizer(md, "tokenizer_2"));
    T5Parts t5 = load_t5_parts(md);
    check_sd3_fit(transformer_config_, te1, te2, vae_config_, *tokenizers_[0], *tokenizers_[1], t5);
    tokenizer_3_ = std::move(t5.tokenizer);
    has_t5_ = t5.config.has_value();
    te_layers_ = std::min(te1.num_hidden_layers, te2.num_hidden_layers);
    const json settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    check_settings(settings);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});

    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // SD3LoraLoaderMixin._lora_loadable_modules: the transformer and both CLIPs (not T5).
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/true);
    load_text_encoder(md, "text_encoder_2", text_encoder_2_, options, /*lora=*/true);
    if (has_t5_) load_text_encoder(md, "text_encoder_3", text_encoder_3_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    if (r.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
    load_vae(md, "vae", vae_, options, r.vae_tiling);  // with diffusers' pipe.vae.enable_tiling() as asked
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, stable_diffusion_3_default_size(md));
    // check_inputs: height and width must be multiples of vae_scale_factor * patch_size (16 for SD3).
    info_.size_multiple = static_cast<int>(vae_config_.scale_factor() * transformer_config_.patch_size);
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }

  void check_settings(const json& settings) const override {
    check_block_cache_settings(settings, transformer_config_.num_layers);
    // cache-dit counts every transformer call as a step of its one context, the skip-layer pass's too, and the
    // cached blocks replace transformer_blocks, whose indices skip_layers names: the two do not combine.
    if (settings.value("dbcache", 0.0) > 0 && !settings.value("skip_guidance_layers", json::array()).empty())
      throw InputError("dbcache and skip_guidance_layers: DBCache does not combine with SD3.5's skip-layer guidance; "
                       "set one of them");
    if (settings.contains("skip_guidance_layers"))
      for (const json& layer : settings["skip_guidance_layers"])
        if (layer.get<int64_t>() >= transformer_config_.num_layers)
          throw InputError("skip_guidance_layers: " + std::to_string(layer.get<int64_t>()) + " is not a block of the "
                           "transformer, which has " + std::to_string(transformer_config_.num_layers) +
                           " (transformer_blocks 0.." + std::to_string(transformer_config_.num_layers - 1) + ")");
    const int64_t clip_skip = settings.value("clip_skip", int64_t{0});
    if (clip_skip >= te_layers_)
      throw InputError("clip_skip " + std::to_string(clip_skip) + ": the text encoders have " +
                       std::to_string(te_layers_ + 1) + " hidden states and SD3 starts from the penultimate; use 0.." +
                       std::to_string(te_layers_ - 1));
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    const int64_t factor = vae_config_.scale_factor();
    check_image_size(first.width, first.height, info_.size_multiple, factor);
    const json settings = resolve_settings(info_.setting_specs, first.settings, "image settings", family_.label);
    check_settings(settings);
    const std::vector<int64_t> skip_layers = settings["skip_guidance_layers"].get<std::vector<int64_t>>();
    const double slg_scale = settings["skip_layer_guidance_scale"].get<double>();
    const double slg_start = settings["skip_layer_guidance_start"].get<double>();
    const double slg_stop = settings["skip_layer_guidance_stop"].get<double>();
    use_loras(batch);
    c10::InferenceMode guard;

    const double guidance = first.guidance_scale;
    const bool cfg = guidance > 1.0;
    // DBCache on transformer_blocks: cache-dit's SD3 adapter keeps one context for the call's whole CFG batch (no
    // separate CFG), so one state for this batch, deciding per image from its negative and prompt rows, j and B + j.
    const BlockCaches caches(settings);
    nn::check_no_step_cache(graphs_.get(), caches.cond() != nullptr);
    std::vector<std::vector<int64_t>> cfg_rows;
    const auto b = static_cast<int64_t>(batch.size());
    if (cfg)
      for (int64_t j = 0; j < b; ++j) cfg_rows.push_back({j, b + j});
    const auto [cond, uncond] = embeds(batch, settings);
    const at::Tensor cond_hidden = cond.hidden, cond_pooled = cond.pooled;
    at::Tensor hidden = cond.hidden, pooled = cond.pooled;
    if (cfg) {
      hidden = at::cat({uncond.hidden, hidden});
      pooled = at::cat({uncond.pooled, pooled});
    }
    denoiser_phase();

    const int64_t h = first.height / factor, w = first.width / factor;

    // retrieve_timesteps(num_inference_steps) without sigmas: the scheduler spaces and shifts them
    // itself (SD3's double shift); mu only for a config with dynamic shifting, from (h / p) (w / p).
    TimestepRequest request;
    request.steps = first.steps;
    if (dynamic_shifting()) {
      const int64_t p = transformer_config_.patch_size;
      request.mu = calculate_shift((h / p) * (w / p), scheduler_config_);
    }
    scheduler_->set_timesteps(request);
    const at::Tensor timesteps = scheduler_->timesteps();
    const int64_t begin = first.image ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);

    at::Tensor latents;  // [B, C, H / f, W / f]
    std::vector<at::Generator> generators;
    at::Tensor inpaint_image, inpaint_noise, inpaint_mask;  // inpainting: what each step blends back
    if (first.image) {
      // Ref: StableDiffusion3Img2ImgPipeline.prepare_latents: each image encoded alone with its generator,
      // (z - shift_factor) * scaling_factor, then scale_noise to the first step's sigma. That pipeline
      // has no skip-layer guidance.
      if (!skip_layers.empty())
        throw InputError("skip_guidance_layers: diffusers' SD3 img2img and inpainting pipelines have no skip-layer "
                         "guidance; unset it for items with an input image");
      vae_phase();  // --offload model: the VAE to the device to encode
      ImageStart start = flow_image_start(batch, *vae_, vae_config_, dtype_, device_);
      denoiser_phase();
      latents = scheduler_->add_noise(start.image_latents, start.noise, begin);
      generators = std::move(start.generators);
      if (first.mask) {
        // Ref: StableDiffusion3InpaintPipeline with a 16-channel transformer: at strength 1 the latents are the
        // noise itself; the mask is binarized and F.interpolate'd (nearest) to the latents; after each step the
        // kept region is the image at the next step's sigma. Its masked-image encode feeds only a 33-channel
        // transformer (which dpinfer does not load) and moves the generators on, which nothing reads after it
        // (flow matching steps without noise): skipped.
        if (first.strength == 1.0) latents = start.noise;
        inpaint_mask = latent_masks(batch, h, w).to(device_, dtype_);  // [B, 1, h, w]
        inpaint_image = start.image_latents;
        inpaint_noise = start.noise;
      }
    } else {
      // prepare_latents: [B, C, H / f, W / f] noise in the prompt embeddings' dtype, one generator per image.
      BatchNoise noise = batch_noise(batch, transformer_config_.in_channels, h, w, dtype_, device_);
      latents = noise.noise;
      generators = std::move(noise.generators);
    }

    // --cuda-graphs (nn/cuda_graphs.h): the transformer's weights for this batch's calls. A call's host input, the
    // blocks skip-layer guidance leaves out, is in its graph's context; the forward reads nothing back from the
    // device (the patch embedding's positions are a device buffer).
    const uint64_t weights = nn::denoiser_weights(graphs_.get(), *transformer_);
    // One transformer call (the CFG batch [negative, prompt], or SLG's pass without `skip`): eager, or replayed
    // from its CUDA graph (the same kernels).
    const auto transformer = [&](const at::Tensor& x, const at::Tensor& text, const at::Tensor& pooled_text,
                                 const at::Tensor& t, const std::vector<int64_t>& skip, nn::BlockCache* cache) {
      std::string context = skip.empty() ? "call" : "skip";
      for (int64_t layer : skip) context += " " + std::to_string(layer);
      return nn::run_denoiser(graphs_.get(), {x, text, pooled_text, t}, context + "/" + lora_key("transformer"),
                              weights, [&](const std::vector<at::Tensor>& v) {
                                return transformer_->forward(v[0], v[1], v[2], v[3], skip, cache, cfg_rows);
                              });
    };
    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      const at::Tensor x = cfg ? at::cat({latents, latents}) : latents;
      const at::Tensor t = timesteps[begin + i].to(device_).expand({x.size(0)});  // float32, sigma * 1000
      at::Tensor pred = transformer(x, hidden, pooled, t, {}, caches.cond());
      // Skip-layer guidance (SD3.5): with CFG, at steps start * steps < i < stop * steps, a pass on the
      // prompt alone without the listed blocks, and pred += (text - skipped) * scale.
      const double steps = static_cast<double>(first.steps);
      const bool slg = cfg && !skip_layers.empty() && static_cast<double>(i) > steps * slg_start &&
                       static_cast<double>(i) < steps * slg_stop;
      const at::Tensor text_pred = slg ? pred.chunk(2)[1] : at::Tensor();
      if (cfg) pred = guided(pred, guidance, 0.0);  // uncond + s (text - uncond)
      if (slg) {
        const at::Tensor skipped = transformer(latents, cond_hidden, cond_pooled,
                                               timesteps[begin + i].to(device_).expand({latents.size(0)}), skip_layers,
                                               nullptr);
        pred = pred + (text_pred - skipped) * slg_scale;
      }
      latents = scheduler_->step(pred, i, latents, generators);
      if (inpaint_mask.defined())
        latents = blend_kept_region(*scheduler_, latents, inpaint_image, inpaint_noise, inpaint_mask, begin + i + 1);
    }
    throw_if_cancelled();
    caches.count_into(statistics_);  // the images of this batch, for the run summary
    nn::count_graphs_into(graphs_.get(), statistics_);
    // StableDiffusion3InpaintPipeline decodes latents / scaling_factor and leaves out the shift_factor that its
    // own encode subtracted (diffusers 0.36; its text-to-image and img2img pipelines add it back). dpinfer keeps
    // diffusers' image, so an inpainting item decodes as that pipeline does.
    const at::Tensor z = inpaint_mask.defined() ? latents / vae_config_.scaling_factor
                                                : latents / vae_config_.scaling_factor + *vae_config_.shift_factor;
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W]
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.scale_factor());
    const json settings = resolve_settings(info_.setting_specs, batch.front().settings, "image settings", family_.label);
    check_settings(settings);
    embeds(batch, settings);
  }

 private:
  /// Both sides of a batch under its `settings`: the prompts', and with CFG the negative side
  /// (else undefined). do_classifier_free_guidance: guidance_scale > 1. The negative side is
  /// always encoded then (the default negative prompt is ""), from the penultimate layer whatever
  /// clip_skip says; generate() batches it first: [negative, positive].
  std::pair<Sd3PromptEmbeds, Sd3PromptEmbeds> embeds(const std::vector<ImageRequest>& batch, const json& settings) {
    const int64_t clip_skip = settings["clip_skip"].get<int64_t>();
    const int64_t max_sequence_length = settings["max_sequence_length"].get<int64_t>();
    Sd3PromptEmbeds cond = encode(batch, /*negative=*/false, clip_skip, max_sequence_length);
    if (batch.front().guidance_scale <= 1.0) return {cond, Sd3PromptEmbeds{}};
    return {cond, encode(batch, /*negative=*/true, 0, max_sequence_length)};
  }

  bool dynamic_shifting() const {
    auto it = scheduler_config_.find("use_dynamic_shifting");
    return it != scheduler_config_.end() && it->is_boolean() && it->get<bool>();
  }

  /// The token ids of `texts` for CLIP tokenizer `k`, [N, tokenizer_max_length].
  at::Tensor token_ids(const std::vector<std::string>& texts, size_t k, bool negative) const {
    const int max_len = tokenizers_[0]->model_max_length();  // the pipeline's tokenizer_max_length, for both
    std::vector<int64_t> ids;
    for (const std::string& text : texts) {
      Encoding e = tokenizers_[k]->encode(text, max_len);
      if (k == 0) warn_truncated(text, negative, e.dropped_tokens, max_len, "CLIP");
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    }
    return at::tensor(ids, at::kLong).view({static_cast<int64_t>(texts.size()), -1}).to(device_);
  }

  /// One side's embeddings through the cache: each distinct text not cached under this side,
  /// clip_skip and max_sequence_length is encoded once.
  Sd3PromptEmbeds encode(const std::vector<ImageRequest>& batch, bool negative, int64_t skip, int64_t max_seq) {
    std::vector<std::string> texts;
    for (const ImageRequest& r : batch) texts.push_back(negative ? r.negative_prompt : r.prompt);
    // The LoRAs merged into the CLIPs change their output: they key the entries too.
    const std::string key = std::string(negative ? "negative" : "prompt") + " clip_skip=" + std::to_string(skip) +
                            " max_sequence_length=" + std::to_string(max_seq) + " loras=" + lora_key("text_encoder") +
                            ";" + lora_key("text_encoder_2");
    std::vector<at::Tensor> rows = embeddings_.rows(texts, key, [&](const std::vector<std::string>& distinct) {
      encoder_phase();
      Sd3PromptEmbeds e = encode_texts(distinct, negative, skip, max_seq);
      return std::vector<at::Tensor>{e.hidden, e.pooled};
    });
    return {rows[0], rows[1]};
  }

  /// Ref: StableDiffusion3Pipeline.encode_prompt, _get_clip_prompt_embeds, _get_t5_prompt_embeds.
  /// Each CLIP's hidden_states[-(skip + 2)] (no final layer norm), side by side, padded with zero
  /// channels to T5's width (joint_attention_dim, which check_sd3_fit() makes T5's d_model; or cut to it
  /// when wider: F.pad with a negative width), then T5's states along the sequence: the text's
  /// last_hidden_state at max_seq tokens, no mask (prompt_3 and negative_prompt_3 default to the
  /// prompt and the negative prompt); without text_encoder_3, zeros [N, max_seq, joint_attention_dim].
  /// pooled = both CLIPs' text_embeds side by side.
  Sd3PromptEmbeds encode_texts(const std::vector<std::string>& texts, bool negative, int64_t skip, int64_t max_seq) {
    auto e1 = text_encoder_->encode_for_sdxl(token_ids(texts, 0, negative), skip);
    auto e2 = text_encoder_2_->encode_for_sdxl(token_ids(texts, 1, negative), skip);
    at::Tensor clip = at::cat({e1.hidden.to(dtype_), e2.hidden.to(dtype_)}, -1);  // [N, 77, D1 + D2]
    const int64_t joint = transformer_config_.joint_attention_dim;
    clip = clip.size(-1) <= joint ? at::constant_pad_nd(clip, {0, joint - clip.size(-1)}, 0)
                                  : clip.narrow(-1, 0, joint).contiguous();
    const at::Tensor t5 = has_t5_ ? t5_prompt_embeds(*text_encoder_3_, *tokenizer_3_, texts,
                                                             static_cast<int>(max_seq), negative, device_, dtype_)
                                          : at::zeros({clip.size(0), max_seq, joint}, clip.options());
    return {at::cat({clip, t5}, -2), at::cat({e1.text_embeds, e2.text_embeds}, -1)};
  }

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  SD3TransformerConfig transformer_config_;
  AutoencoderKLConfig vae_config_;
  json scheduler_config_;
  std::vector<std::unique_ptr<Tokenizer>> tokenizers_;  // the two CLIPs'
  std::unique_ptr<Tokenizer> tokenizer_3_;              // T5's, or null without T5
  int64_t te_layers_ = 0;
  std::unique_ptr<Scheduler> scheduler_;
  bool has_t5_ = false;
  // Each null while two-phase chunks release it (the text encoders between chunks' encodings,
  // the transformer while they run).
  std::shared_ptr<CLIPTextModelWithProjectionImpl> text_encoder_, text_encoder_2_;
  std::shared_ptr<T5EncoderModelImpl> text_encoder_3_;  // null without T5
  std::shared_ptr<SD3Transformer2DModelImpl> transformer_;
  std::shared_ptr<AutoencoderKLImpl> vae_;
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
  PipelineInfo info_;
  json statistics_ = json::object();  ///< statistics(): DBCache's counts over the run, and the graphs'
};

}  // namespace

void check_stable_diffusion_3_components(const ModelDir& md) {
  check_sd3_fit(SD3TransformerConfig::from_json(md.at("transformer").config),
            CLIPTextConfig::from_json(md.at("text_encoder").config),
            CLIPTextConfig::from_json(md.at("text_encoder_2").config),
            AutoencoderKLConfig::from_json(md.at("vae").config), *load_tokenizer(md, "tokenizer"),
            *load_tokenizer(md, "tokenizer_2"), load_t5_parts(md));
}

std::unique_ptr<TextToImage> load_stable_diffusion_3(const ModelDir& model, const LoadRequest& request,
                                                     const Family& family) {
  return std::make_unique<StableDiffusion3Pipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

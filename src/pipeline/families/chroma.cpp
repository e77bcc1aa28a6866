// Ref: diffusers/pipelines/chroma/pipeline_chroma.py ChromaPipeline (diffusers 0.36.0): _get_t5_prompt_embeds,
// encode_prompt, prepare_latents, _prepare_attention_mask and __call__ (the latent layout is FluxPipeline's:
// flux_latents.h). tools/fixtures/make_chroma_pipelines.py records its goldens.
#include "dpinfer/pipeline/families/chroma.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "block_caches.h"
#include "denoising.h"
#include "dpinfer/pipeline/families/flux.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/text_encoders/t5_config.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/models/transformers/chroma_transformer.h"
#include "dpinfer/pipeline/models/transformers/chroma_transformer_config.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "flux_latents.h"
#include "lora_pipeline.h"
#include "pipeline_info.h"
#include "t5_prompt.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

/// check_chroma_components() on parsed configs.
void check_chroma_fit(const ChromaTransformerConfig& t, const T5Config& t5, const AutoencoderKLConfig& vae) {
  auto mismatch = [](const std::string& what) {
    throw InputError("transformer config: " + what + "; the components do not belong together");
  };
  if (t.joint_attention_dim != t5.d_model)
    mismatch("joint_attention_dim " + std::to_string(t.joint_attention_dim) + " is not text_encoder's (T5) d_model " +
             std::to_string(t5.d_model));
  check_packed_channels(t.in_channels, t.out_features(), vae);
  check_vae_shift_factor(vae, "ChromaPipeline");
}

class ChromaPipeline : public LoraPipeline {
 public:
  ChromaPipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family),
        dtype_(parse_dtype(r.dtype)),
        device_(r.device),
        transformer_config_(ChromaTransformerConfig::from_json(md.at("transformer").config)),
        vae_config_(AutoencoderKLConfig::from_json(md.at("vae").config)),
        scheduler_config_(md.at("scheduler").config) {
    const T5Config t5 = T5Config::from_json(md.at("text_encoder").config);
    check_chroma_fit(transformer_config_, t5, vae_config_);
    const Component& tok = md.at("tokenizer");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);
    check_t5_tokenizer_fits(*tokenizer_, t5, "tokenizer", "text_encoder");

    const json settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});
    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // ChromaPipeline loads LoRAs with FluxLoraLoaderMixin, whose text-encoder path reads CLIP names
    // only (_load_lora_into_text_encoder: convert_state_dict_to_peft refuses T5's): the transformer.
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    if (r.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
    load_vae(md, "vae", vae_, options, r.vae_tiling);  // with diffusers' pipe.vae.enable_tiling() as asked
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, flux_default_size(md));
    // check_inputs: height and width should be multiples of vae_scale_factor * 2 (16 for Chroma).
    info_.size_multiple = static_cast<int>(2 * vae_config_.scale_factor());
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }
  void check_settings(const json& settings) const override {
    // cache-dit's Chroma adapter caches the double- and the single-stream blocks apart, each list with the same Fn
    // and Bn.
    check_block_cache_settings(settings, std::min(transformer_config_.num_layers, transformer_config_.num_single_layers),
                               "blocks in each of its double- and single-stream lists (cached apart)");
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    const int64_t factor = vae_config_.scale_factor();
    const int max_sequence_length = batch_max_sequence_length(batch);
    // DBCache: ChromaPipeline runs the prompt, then with CFG the negative prompt, in calls of their own: a state
    // each (cache-dit's non-CFG and CFG steps), and per block list, for this batch.
    const BlockCaches caches(resolve_settings(info_.setting_specs, first.settings, "image settings", family_.label),
                             /*lists=*/2);
    nn::check_no_step_cache(graphs_.get(), caches.cond() || caches.uncond());
    use_loras(batch);
    const double guidance_scale = first.guidance_scale;
    const bool cfg = guidance_scale > 1.0;
    c10::InferenceMode guard;
    const int64_t b = static_cast<int64_t>(batch.size());
    const auto [cond, uncond] = embeds(batch, max_sequence_length);
    denoiser_phase();
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    const at::Tensor text_ids = at::zeros({cond.t5.size(1), 3}, options);  // encode_prompt: zeros (L, 3)

    const int64_t h = 2 * (first.height / (factor * 2)), w = 2 * (first.width / (factor * 2));
    const int64_t image_len = (h / 2) * (w / 2);
    const at::Tensor image_ids = latent_image_ids(h / 2, w / 2, options);

    TimestepRequest steps;
    steps.sigmas = flow_match_linear_sigmas(first.steps);
    steps.mu = calculate_shift(image_len, scheduler_config_);
    scheduler_->set_timesteps(steps);
    const at::Tensor timesteps = scheduler_->timesteps();
    const int64_t begin = first.image ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);
    at::Tensor latents;  // [B, (h/2)(w/2), 4C]
    std::vector<at::Generator> generators;
    if (first.image) {
      // Ref: ChromaImg2ImgPipeline.prepare_latents (FluxImg2ImgPipeline's): each image encoded alone with its
      // generator, (z - shift_factor) * scaling_factor, scale_noise to the first step's sigma, packed.
      vae_phase();  // --offload model: the VAE to the device to encode
      ImageStart start = flow_image_start(batch, *vae_, vae_config_, dtype_, device_);
      denoiser_phase();
      latents = pack_latents(scheduler_->add_noise(start.image_latents, start.noise, begin));
      generators = std::move(start.generators);
    } else {
      // prepare_latents: [B, C, h, w] noise from each image's generator in the prompt dtype, packed.
      BatchNoise noise = batch_noise(batch, vae_config_.latent_channels, h, w, dtype_, device_);
      latents = pack_latents(noise.noise);
      generators = std::move(noise.generators);
    }
    // _prepare_attention_mask: the text mask then ones for the image tokens, [B, L_txt + L_img]; torch.cat
    // of the float text mask and a bool one is float, in the prompt dtype.
    auto joint_mask = [&](const at::Tensor& text_mask) {
      return at::cat({text_mask, at::ones({b, image_len}, text_mask.options())}, 1);
    };
    const at::Tensor mask = joint_mask(cond.mask);
    const at::Tensor uncond_mask = cfg ? joint_mask(uncond.mask) : at::Tensor();

    // --cuda-graphs (nn/cuda_graphs.h): the transformer's weights for this batch's calls. Every input of a call is a
    // tensor on the device; the forward's approximator constants, computed on the CPU as diffusers does, are kept
    // on the device after the first (warm-up) call, so a capture copies nothing from the host.
    const uint64_t weights = nn::denoiser_weights(graphs_.get(), *transformer_);
    // One transformer call (the prompt's or CFG's negative, each with its DBCache states): eager, or replayed from
    // its CUDA graph (the same kernels).
    const auto transformer = [&](const at::Tensor& t5, const at::Tensor& timestep, const at::Tensor& attention_mask,
                                 nn::BlockCache* double_cache, nn::BlockCache* single_cache, const char* context) {
      return nn::run_denoiser(graphs_.get(), {latents, t5, timestep, image_ids, text_ids, attention_mask},
                              std::string(context) + "/" + lora_key("transformer"), weights,
                              [&](const std::vector<at::Tensor>& v) {
                                return transformer_->forward(v[0], v[1], v[2], v[3], v[4], v[5], double_cache,
                                                             single_cache);
                              });
    };
    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // ChromaPipeline: timestep = t.expand(B).to(latents.dtype), passed as timestep / 1000 in that dtype.
      // ChromaImg2ImgPipeline leaves out the cast: t.expand(B) / 1000 stays float32 until the transformer's own.
      at::Tensor timestep = timesteps[begin + i].to(device_).expand({b});
      if (!first.image) timestep = timestep.to(latents.scalar_type());
      timestep = timestep / 1000;
      at::Tensor pred = transformer(cond.t5, timestep, mask, caches.cond(0), caches.cond(1), "cond");
      if (cfg) {
        const at::Tensor neg =
            transformer(uncond.t5, timestep, uncond_mask, caches.uncond(0), caches.uncond(1), "uncond");
        pred = neg + guidance_scale * (pred - neg);
      }
      latents = scheduler_->step(pred, i, latents, generators);
    }
    caches.count_into(statistics_);  // the images of this batch, for the run summary
    nn::count_graphs_into(graphs_.get(), statistics_);
    throw_if_cancelled();

    const at::Tensor z = packed_latents_for_decode(latents, h, w, vae_config_, dtype_);
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W] in about [-1, 1]
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override {
    embeds(batch, batch_max_sequence_length(batch));
  }

 private:
  /// One side (prompts or negative prompts) of a batch as the transformer takes it.
  struct Conditioning {
    at::Tensor t5;    ///< [B, max_sequence_length, d_model]: T5's last hidden state, in the run dtype
    at::Tensor mask;  ///< [B, max_sequence_length]: 1 for the tokens and one padding token, else 0
  };

  /// The batch's max_sequence_length setting, after the size check.
  int batch_max_sequence_length(const std::vector<ImageRequest>& batch) const {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.scale_factor());
    const json settings = resolve_settings(info_.setting_specs, batch.front().settings, "image settings", family_.label);
    return static_cast<int>(settings["max_sequence_length"].get<int64_t>());
  }

  /// The prompts' conditioning, and with CFG (do_classifier_free_guidance: guidance_scale > 1) the
  /// negative prompts' or ""'s (negative_prompt or ""); else undefined.
  std::pair<Conditioning, Conditioning> embeds(const std::vector<ImageRequest>& batch, int max_sequence_length) {
    std::vector<std::string> prompts, negatives;
    for (const ImageRequest& request : batch) {
      prompts.push_back(request.prompt);
      negatives.push_back(request.negative_prompt);
    }
    Conditioning cond = encode(prompts, max_sequence_length, /*negative=*/false);
    if (batch.front().guidance_scale <= 1.0) return {cond, Conditioning{}};
    return {cond, encode(negatives, max_sequence_length, /*negative=*/true)};
  }

  /// _get_t5_prompt_embeds for `texts`, each text in its own call, through the cache. Every text is
  /// padded to the same length and T5 attends within its own row, so an image's conditioning does
  /// not depend on its batch-mates.
  Conditioning encode(const std::vector<std::string>& texts, int max_sequence_length, bool negative) {
    // The side is in the key only so that a truncation warning names the right one; T5 takes no LoRA.
    const std::string key =
        std::string(negative ? "negative" : "prompt") + " max_sequence_length=" + std::to_string(max_sequence_length);
    std::vector<at::Tensor> t5_rows, mask_rows;
    for (std::vector<at::Tensor>& e : embeddings_.each(texts, key, [&](const std::string& text) {
           encoder_phase();
           auto [t5, mask] = encode_one(text, max_sequence_length, negative);
           return std::vector<at::Tensor>{t5, mask};
         })) {
      t5_rows.push_back(e[0]);
      mask_rows.push_back(e[1]);
    }
    return {at::cat(t5_rows), at::cat(mask_rows)};
  }

  std::pair<at::Tensor, at::Tensor> encode_one(const std::string& text, int max_sequence_length, bool negative) {
    // max_length padding with truncation; unlike FLUX.1, T5 sees the tokenizer's attention mask.
    const Encoding t5 = tokenizer_->encode(text, max_sequence_length);
    warn_truncated(text, negative, t5.dropped_tokens, max_sequence_length, "T5 (max_sequence_length)");
    const at::Tensor ids = at::tensor(t5.ids, at::kLong).view({1, -1}).to(device_);
    const at::Tensor tokenizer_mask = at::tensor(t5.attention_mask, at::kLong).view({1, -1}).to(device_);
    const at::Tensor embeds = text_encoder_->forward(ids, tokenizer_mask).to(dtype_);  // [1, L, d_model]
    return {embeds, chroma_text_mask(tokenizer_mask, dtype_)};
  }

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  ChromaTransformerConfig transformer_config_;
  AutoencoderKLConfig vae_config_;
  json scheduler_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<T5EncoderModelImpl> text_encoder_;              // null while two-phase chunks release it,
  std::shared_ptr<ChromaTransformer2DModelImpl> transformer_;  // and this one while the encoder runs
  std::shared_ptr<AutoencoderKLImpl> vae_;
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
  PipelineInfo info_;
  json statistics_ = json::object();  ///< statistics(): DBCache's counts over the run, and the graphs'
};

}  // namespace

at::Tensor chroma_text_mask(const at::Tensor& tokenizer_mask, at::ScalarType dtype) {
  // Chroma keeps the first padding token: (arange(L) <= seq_len).to(dtype), seq_len the real tokens
  // (with </s>).
  const at::Tensor seq_len = tokenizer_mask.sum(1, /*keepdim=*/true);  // [B, 1]
  const at::Tensor positions = at::arange(tokenizer_mask.size(1), tokenizer_mask.options()).unsqueeze(0);
  return positions.le(seq_len).to(dtype);  // [B, L]
}

void check_chroma_components(const ModelDir& md) {
  const T5Config t5 = T5Config::from_json(md.at("text_encoder").config);
  check_chroma_fit(ChromaTransformerConfig::from_json(md.at("transformer").config), t5,
            AutoencoderKLConfig::from_json(md.at("vae").config));
  const Component& tok = md.at("tokenizer");
  check_t5_tokenizer_fits(*find_tokenizer_class(tok.class_name)->load(tok.path), t5, "tokenizer", "text_encoder");
}

std::unique_ptr<TextToImage> load_chroma(const ModelDir& model, const LoadRequest& request, const Family& family) {
  return std::make_unique<ChromaPipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

// Ref: diffusers/pipelines/z_image/pipeline_z_image.py ZImagePipeline (diffusers 0.36.0).
// tools/fixtures/make_z_image_pipelines.py records its goldens; tools/fixtures/README.md lists the
// behaviours below.
#include "dpinfer/pipeline/families/z_image.h"

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
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/pipeline/models/transformers/z_image_transformer.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/text/qwen2_tokenizer.h"
#include "dpinfer/util/error.h"
#include "lora_pipeline.h"
#include "pipeline_info.h"

namespace dpinfer::pipeline {

std::string z_image_chat_prompt(const std::string& prompt) {
  return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
}

std::array<int64_t, 2> z_image_default_size(const ModelDir& model) {
  // ZImagePipeline.__call__ defaults to 1024 x 1024 whatever the configs say. A transformer whose RoPE
  // table is shorter than 1024 px needs (axes_lens[1] or [2] patches of 2 latents, the patch the pipeline
  // uses) makes diffusers fail at that default with an index error; dpinfer defaults such a model to
  // the largest size its table covers (models/dpinfer-shapes-dit-64: 8 x 8 patches, 64 x 64 pixels).
  constexpr int64_t kPipelineDefault = 1024;
  constexpr int64_t kPatch = 2;
  const ZImageTransformerConfig tc = ZImageTransformerConfig::from_json(model.at("transformer").config);
  const int64_t pixels_per_patch = kPatch * AutoencoderKLConfig::from_json(model.at("vae").config).scale_factor();
  return {std::min(kPipelineDefault, tc.axes_lens[1] * pixels_per_patch),
          std::min(kPipelineDefault, tc.axes_lens[2] * pixels_per_patch)};
}

namespace {

using nlohmann::json;

// The patch sizes ZImagePipeline calls the transformer with (its forward's defaults).
constexpr int64_t kPatch = 2, kFramePatch = 1;

/// check_z_image_components() on parsed configs.
void check_z_image_fit(const ZImageTransformerConfig& tc, const DecoderLLMConfig& text_config,
             const AutoencoderKLConfig& vae_config, const Qwen2Tokenizer& tokenizer) {
  if (tc.cap_feat_dim != text_config.hidden_size)
    throw InputError("transformer config: cap_feat_dim " + std::to_string(tc.cap_feat_dim) +
                     " is not the text encoder's hidden_size " + std::to_string(text_config.hidden_size) +
                     "; the components do not belong together");
  if (tc.in_channels != vae_config.latent_channels)
    throw InputError("transformer config: in_channels " + std::to_string(tc.in_channels) +
                     " is not the VAE's latent_channels " + std::to_string(vae_config.latent_channels) +
                     "; the components do not belong together");
  bool has_2_1 = false;
  for (size_t k = 0; k < tc.all_patch_size.size() && k < tc.all_f_patch_size.size(); ++k)
    has_2_1 = has_2_1 || (tc.all_patch_size[k] == 2 && tc.all_f_patch_size[k] == 1);
  if (!has_2_1)
    throw InputError("transformer config: all_patch_size / all_f_patch_size have no (2, 1) pair, the patch "
                     "size ZImagePipeline runs the transformer with");
  if (!vae_config.shift_factor)
    throw InputError("vae config: shift_factor is missing or null, and ZImagePipeline decodes latents / "
                     "scaling_factor + shift_factor; the VAE is not Z-Image's");
  const int64_t vocab = text_config.vocab_size;
  for (const char* token : {"<|im_start|>", "<|im_end|>"}) {
    const std::optional<int64_t> id = tokenizer.token_id(token);
    if (!id)
      throw InputError(std::string("tokenizer: it has no ") + token +
                       " token, which Z-Image's chat template needs; the tokenizer is not Qwen3's");
    if (*id >= vocab)
      throw InputError(std::string("tokenizer: ") + token + " is id " + std::to_string(*id) +
                       ", past the text encoder's vocab_size " + std::to_string(vocab) +
                       "; the components do not belong together");
  }
  if (tokenizer.pad_id() >= vocab)
    throw InputError("tokenizer: the pad token is id " + std::to_string(tokenizer.pad_id()) +
                     ", past the text encoder's vocab_size " + std::to_string(vocab) +
                     "; the components do not belong together");
}

/// One side (positive or negative) of a batch's prompts, as the transformer takes them.
struct Captions {
  at::Tensor features;           ///< [B, max length, hidden]: item i's unmasked tokens in its first rows, then zeros
  std::vector<int64_t> lengths;  ///< unmasked tokens per item
};

/// `a` then `b`, padded with zeros to the longer of the two: the CFG batch's captions.
Captions concatenated(const Captions& a, const Captions& b) {
  const int64_t len = std::max(a.features.size(1), b.features.size(1));
  auto padded = [len](const at::Tensor& t) {
    return t.size(1) == len ? t : at::constant_pad_nd(t, {0, 0, 0, len - t.size(1)}, 0);
  };
  Captions out{at::cat({padded(a.features), padded(b.features)}), a.lengths};
  out.lengths.insert(out.lengths.end(), b.lengths.begin(), b.lengths.end());
  return out;
}

class ZImagePipeline : public LoraPipeline {
 public:
  ZImagePipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family),
        dtype_(parse_dtype(r.dtype)),
        device_(r.device),
        transformer_config_(ZImageTransformerConfig::from_json(md.at("transformer").config)),
        text_config_(DecoderLLMConfig::qwen3_from_json(md.at("text_encoder").config)),
        vae_config_(AutoencoderKLConfig::from_json(md.at("vae").config)),
        tokenizer_(Qwen2Tokenizer::from_dir(md.at("tokenizer").path)),
        scheduler_config_(md.at("scheduler").config) {
    check_z_image_fit(transformer_config_, text_config_, vae_config_, tokenizer_);
    info_.settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    check_settings(info_.settings);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});

    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // ZImageLoraLoaderMixin: the transformer only.
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    if (r.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
    load_vae(md, "vae", vae_, options, r.vae_tiling);  // with diffusers' pipe.vae.enable_tiling() as asked
    info_ = pipeline_info(md, r, family_, scheduler_->name(), info_.settings, family_.default_size(md));
    // ZImagePipeline's check is against vae_scale_factor * 2 (16 for the real VAE), not the family's 16.
    info_.size_multiple = static_cast<int>(size_multiple());
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }
  void check_settings(const json& settings) const override {
    check_block_cache_settings(settings, transformer_config_.n_layers, "main layers");
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    const json settings = batch_settings(batch);
    // DBCache on the main layers: cache-dit's Z-Image adapter keeps one context for the call's whole CFG batch
    // (no separate CFG), so one state for this batch, deciding per image from its prompt and negative rows.
    const BlockCaches caches(settings);
    nn::check_no_step_cache(graphs_.get(), caches.cond() != nullptr);
    const int max_length = settings["max_sequence_length"].get<int>();
    const double cfg_normalization = settings["cfg_normalization"].get<double>();
    const double cfg_truncation = settings["cfg_truncation"].get<double>();
    use_loras(batch);

    c10::InferenceMode guard;
    const auto b = static_cast<int64_t>(batch.size());
    // ZImagePipeline.do_classifier_free_guidance: only guidance_scale > 1 encodes the negative side.
    const double guidance = first.guidance_scale;
    const bool cfg = guidance > 1.0;
    const Captions positive = encode(batch, /*negative=*/false, max_length);
    std::optional<Captions> with_negative;
    if (cfg) with_negative = concatenated(positive, encode(batch, /*negative=*/true, max_length));
    denoiser_phase();

    // prepare_latents: float32 noise [B, C, 2 * (H // (f * 2)), 2 * (W // (f * 2))], one generator
    // per image; the latents stay float32 through the scheduler.
    const int64_t f2 = size_multiple();
    const int64_t h = 2 * (first.height / f2), w = 2 * (first.width / f2);

    // mu from the packed token count (ignored by a static-shift config such as Turbo's); the
    // pipeline sets scheduler.sigma_min = 0.0, so the schedule ends at sigma 0.
    TimestepRequest request;
    request.steps = first.steps;
    request.mu = calculate_shift((h / 2) * (w / 2), scheduler_config_);
    request.sigma_min = 0.0;
    scheduler_->set_timesteps(request);
    const at::Tensor& timesteps = scheduler_->timesteps();
    const int64_t begin = first.image ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);
    at::Tensor latents;  // [B, C, h, w]
    std::vector<at::Generator> generators;
    if (first.image) {
      // Ref: ZImageImg2ImgPipeline.prepare_latents: each image encoded alone with its generator in the prompt
      // dtype, (z - shift_factor) * scaling_factor, and scale_noise in that dtype (not float32 as the
      // text-to-image pipeline's noise); the first step's float32 velocity makes the latents float32 after it.
      vae_phase();  // --offload model: the VAE to the device to encode
      ImageStart start = flow_image_start(batch, *vae_, vae_config_, dtype_, device_);
      denoiser_phase();
      latents = scheduler_->add_noise(start.image_latents, start.noise, begin);
      generators = std::move(start.generators);
    } else {
      BatchNoise noise = batch_noise(batch, transformer_config_.in_channels, h, w, at::kFloat, device_);
      latents = noise.noise;
      generators = std::move(noise.generators);
    }

    // The CFG batch's rows of image j: its prompt's, j, and its negative's, b + j.
    std::vector<std::vector<int64_t>> cfg_rows;
    for (int64_t j = 0; j < b; ++j) cfg_rows.push_back({j, b + j});
    // --cuda-graphs (nn/cuda_graphs.h): the transformer's weights for this batch's calls. A call's host input, each
    // caption's token count (it shapes the padded caption rows and their positions, which the forward builds on
    // the device), is in its graph's context. cfg_truncation's t.item() stays outside, in this loop.
    const uint64_t weights = nn::denoiser_weights(graphs_.get(), *transformer_);
    // One transformer call (the CFG batch [prompt, negative], or the prompt alone): eager, or replayed from its CUDA
    // graph (the same kernels).
    const auto transformer = [&](const at::Tensor& x, const at::Tensor& t, const Captions& captions,
                                 const std::vector<std::vector<int64_t>>& rows) {
      std::string context = rows.empty() ? "cond" : "cfg";
      context += "/" + lora_key("transformer") + "/lengths";
      for (int64_t length : captions.lengths) context += " " + std::to_string(length);
      return nn::run_denoiser(graphs_.get(), {x, t, captions.features}, context, weights,
                              [&](const std::vector<at::Tensor>& v) {
                                return transformer_->forward(v[0], v[1], v[2], captions.lengths, kPatch, kFramePatch,
                                                             caches.cond(), rows);
                              });
    };
    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // The model's time runs the other way: (1000 - t) / 1000 in float32, 0 at the start.
      const at::Tensor t = (1000 - timesteps[begin + i]) / 1000;
      const double t_norm = t.item<double>();
      // cfg_truncation: no guidance once t_norm passes it (a value above 1 never truncates).
      double scale = guidance;
      if (cfg && cfg_truncation <= 1 && t_norm > cfg_truncation) scale = 0.0;
      const bool apply_cfg = cfg && scale > 0;

      const at::Tensor x = latents.to(dtype_);
      at::Tensor velocity;
      if (apply_cfg) {
        at::Tensor out = transformer(at::cat({x, x}), t.expand({2 * b}).to(device_), *with_negative,
                                     cfg_rows);  // [2B, C, h, w]
        velocity = guided(out, b, scale, cfg_normalization);
      } else {
        velocity = transformer(x, t.expand({b}).to(device_), positive, {}).to(at::kFloat);
      }
      // The transformer predicts the flow the other way round, so the step takes its negation.
      latents = scheduler_->step(-velocity, i, latents, generators);
    }
    throw_if_cancelled();
    caches.count_into(statistics_);  // the images of this batch, for the run summary
    nn::count_graphs_into(graphs_.get(), statistics_);
    const double shift = *vae_config_.shift_factor;
    at::Tensor z = latents.to(dtype_) / vae_config_.scaling_factor + shift;
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W]
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override {
    const int max_length = batch_settings(batch)["max_sequence_length"].get<int>();
    encode(batch, /*negative=*/false, max_length);
    if (batch.front().guidance_scale > 1.0) encode(batch, /*negative=*/true, max_length);
  }

 private:
  /// The batch's settings, after the size and settings checks.
  json batch_settings(const std::vector<ImageRequest>& batch) const {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.scale_factor());
    json settings = resolve_settings(info_.setting_specs, batch.front().settings, "image settings", family_.label);
    check_settings(settings);
    return settings;
  }

  /// vae_scale_factor * 2: one latent pixel pair per transformer patch; sizes must be multiples of it.
  int64_t size_multiple() const { return 2 * vae_config_.scale_factor(); }

  /// Ref: ZImagePipeline._encode_prompt: each text in the chat template, tokenized with padding to
  /// max_length and truncation, the text encoder's hidden_states[-2] (the un-normed output of its
  /// next-to-last layer), and each item's unmasked tokens only. The batch's distinct texts in one
  /// call, through the cache.
  Captions encode(const std::vector<ImageRequest>& batch, bool negative, int max_length) {
    const auto b = static_cast<int64_t>(batch.size());
    std::vector<std::string> texts;
    for (const ImageRequest& r : batch) texts.push_back(negative ? r.negative_prompt : r.prompt);
    // The side is in the key only so that a truncation warning names the right one; the text
    // encoder takes no LoRA.
    const std::string key =
        std::string(negative ? "negative" : "prompt") + " max_sequence_length=" + std::to_string(max_length);
    const std::vector<at::Tensor> encoded = embeddings_.rows(texts, key, [&](const std::vector<std::string>& distinct) {
      encoder_phase();
      return encode_texts(distinct, negative, max_length);
    });
    const at::Tensor& hidden = encoded[0];  // [B, L, D]
    const at::Tensor& mask_t = encoded[1];  // [B, L] bool

    Captions out;
    std::vector<at::Tensor> rows;
    for (int64_t i = 0; i < b; ++i) {
      const at::Tensor keep = mask_t[i].nonzero().squeeze(1).to(device_);  // left or right padding
      rows.push_back(hidden[i].index_select(0, keep));                      // [n_i, D]
      out.lengths.push_back(keep.size(0));
    }
    const int64_t longest = *std::max_element(out.lengths.begin(), out.lengths.end());
    for (at::Tensor& row : rows)
      if (row.size(0) < longest) row = at::constant_pad_nd(row, {0, 0, 0, longest - row.size(0)}, 0);
    out.features = at::stack(rows);  // [B, longest, D]
    return out;
  }

  /// The text encoder's hidden_states[-2] of `texts` in one call, [N, max_length, D], and their
  /// attention masks, [N, max_length] bool.
  std::vector<at::Tensor> encode_texts(const std::vector<std::string>& texts, bool negative, int max_length) {
    std::vector<int64_t> ids, mask;
    for (const std::string& text : texts) {
      Encoding e = tokenizer_.encode(z_image_chat_prompt(text), max_length);
      warn_truncated(text, negative, e.dropped_tokens, max_length, "Qwen3");
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
      mask.insert(mask.end(), e.attention_mask.begin(), e.attention_mask.end());
    }
    const auto n = static_cast<int64_t>(texts.size());
    const at::Tensor id_t = at::tensor(ids, at::kLong).view({n, -1}).to(device_);
    const at::Tensor mask_t = at::tensor(mask, at::kLong).view({n, -1}).to(at::kBool).to(device_);
    return {text_encoder_->hidden_state(id_t, mask_t, -2), mask_t};
  }

  /// The guided prediction from the CFG batch's output [2B, ...] (positive first), per image in
  /// float32: pos + s (pos - neg), and with cfg_normalization c > 0 scaled down to c * |pos| when
  /// its norm is larger (the norms over the whole image, as 0-d float32 tensors like diffusers').
  static at::Tensor guided(const at::Tensor& out, int64_t b, double scale, double normalization) {
    std::vector<at::Tensor> preds;
    for (int64_t j = 0; j < b; ++j) {
      const at::Tensor pos = out[j].to(at::kFloat);
      const at::Tensor neg = out[b + j].to(at::kFloat);
      at::Tensor pred = pos + scale * (pos - neg);
      if (normalization > 0.0) {
        const at::Tensor pos_norm = at::linalg_vector_norm(pos);
        const at::Tensor pred_norm = at::linalg_vector_norm(pred);
        const at::Tensor max_norm = pos_norm * normalization;
        if ((pred_norm > max_norm).item<bool>()) pred = pred * (max_norm / pred_norm);
      }
      preds.push_back(pred);
    }
    return at::stack(preds);  // [B, ...]
  }

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  ZImageTransformerConfig transformer_config_;
  DecoderLLMConfig text_config_;
  AutoencoderKLConfig vae_config_;
  Qwen2Tokenizer tokenizer_;
  json scheduler_config_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<DecoderLLMTextEncoderImpl> text_encoder_;         // null while two-phase chunks release it,
  std::shared_ptr<ZImageTransformer2DModelImpl> transformer_;  // and this one while the encoder runs
  std::shared_ptr<AutoencoderKLImpl> vae_;
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
  PipelineInfo info_;
  json statistics_ = json::object();  ///< statistics(): DBCache's counts over the run, and the graphs'
};

}  // namespace

void check_z_image_components(const ModelDir& md) {
  check_z_image_fit(ZImageTransformerConfig::from_json(md.at("transformer").config),
            DecoderLLMConfig::qwen3_from_json(md.at("text_encoder").config),
            AutoencoderKLConfig::from_json(md.at("vae").config), Qwen2Tokenizer::from_dir(md.at("tokenizer").path));
}

std::unique_ptr<TextToImage> load_z_image(const ModelDir& model, const LoadRequest& request, const Family& family) {
  return std::make_unique<ZImagePipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

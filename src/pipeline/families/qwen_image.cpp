// Ref: diffusers/pipelines/qwenimage/pipeline_qwenimage.py QwenImagePipeline (diffusers 0.36):
// _get_qwen_prompt_embeds, encode_prompt, prepare_latents, _pack_latents, _unpack_latents and
// __call__ (the true-CFG loop and the decode); pipeline_qwenimage_img2img.py and pipeline_qwenimage_inpaint.py
// (_encode_vae_image, prepare_latents, prepare_mask_latents, get_timesteps and the inpainting blend) for items
// that start from an image (issue 29).
#include "dpinfer/pipeline/families/qwen_image.h"

#include <algorithm>
#include <optional>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "block_caches.h"
#include "denoising.h"
#include "flux_latents.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image_config.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_config.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer.h"
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer_config.h"
#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "lora_pipeline.h"
#include "pipeline_info.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

// QwenImagePipeline.prompt_template_encode, split at its "{}": the prompt goes into the user
// turn of a fixed chat whose system message asks for a description of the image.
constexpr const char* kTemplateBefore =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n";
constexpr const char* kTemplateAfter = "<|im_end|>\n<|im_start|>assistant\n";
// prompt_template_encode_start_idx: the encoder states of the first 34 tokens are dropped. Under
// Qwen's vocabulary that is exactly kTemplateBefore (test Qwen2Tokenizer.QwenImagesTemplatePrefixIsThe34IdsDiffusersDrops);
// diffusers drops 34 whatever the tokenizer, and so does dpinfer.
constexpr int64_t kTemplateDrop = 34;
// tokenizer_max_length: the templated text is truncated to 1024 + 34 tokens.
constexpr int kTokenizerMaxLength = 1024;
constexpr int64_t kQwenImageDefaultSampleSize = 128;

/// One side (prompts or negative prompts) of a batch as the transformer takes it.
struct TextConditioning {
  at::Tensor embeds;             ///< [B, L, D]: each text's states, zero-padded to the longest
  at::Tensor mask;               ///< [B, L] int64: 1 for a text token, 0 for padding
  std::vector<int64_t> lengths;  ///< each text's token count (diffusers' txt_seq_lens)
};

std::vector<std::vector<nn::TokenGrid>> grids(int64_t batch, const std::vector<nn::TokenGrid>& grid) {
  return std::vector<std::vector<nn::TokenGrid>>(static_cast<size_t>(batch), grid);
}

/// check_qwen_image_components() on parsed configs.
void check_qwen_image_fit(const QwenImageTransformerConfig& t, const DecoderLLMConfig& te, const AutoencoderKLQwenImageConfig& vae) {
  if (t.joint_attention_dim != te.hidden_size)
    throw InputError("transformer config: joint_attention_dim " + std::to_string(t.joint_attention_dim) +
                     " is not the text encoder's hidden_size " + std::to_string(te.hidden_size) +
                     "; the components do not belong together");
  if (t.in_channels != 4 * vae.z_dim || t.out_channels != vae.z_dim)
    throw InputError("transformer config: in_channels " + std::to_string(t.in_channels) + " and out_channels " +
                     std::to_string(t.out_channels) + " do not fit the VAE's z_dim " + std::to_string(vae.z_dim) +
                     " (expected " + std::to_string(4 * vae.z_dim) + " and " + std::to_string(vae.z_dim) +
                     "); the components do not belong together");
  if (t.patch_size != 2)
    throw InputError("transformer config: patch_size " + std::to_string(t.patch_size) +
                     ": QwenImagePipeline packs latents in 2x2 patches; expected 2");
  if (t.guidance_embeds)
    throw InputError("transformer config: guidance_embeds is true (a guidance-distilled Qwen-Image), which "
                     "diffusers 0.36 cannot run either; use a model with guidance_embeds false");
}

class QwenImagePipeline : public LoraPipeline {
 public:
  QwenImagePipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family),
        dtype_(parse_dtype(r.dtype)),
        device_(r.device),
        transformer_config_(QwenImageTransformerConfig::from_json(md.at("transformer").config)),
        vae_config_(AutoencoderKLQwenImageConfig::from_json(md.at("vae").config)),
        scheduler_config_(md.at("scheduler").config) {
    check_qwen_image_fit(transformer_config_, DecoderLLMConfig::qwen2_5_vl_from_json(md.at("text_encoder").config), vae_config_);
    const Component& tok = md.at("tokenizer");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);

    json settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});

    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // QwenImageLoraLoaderMixin: the transformer only.
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    load_vae(md, "vae", vae_, options);
    vae_->set_tiling(r.vae_tiling);  // diffusers: pipe.vae.enable_tiling()
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, qwen_image_default_size(md));
    // check_inputs: height and width must be multiples of vae_scale_factor * 2 (16 for Qwen-Image).
    info_.size_multiple = static_cast<int>(2 * vae_config_.scale_factor());
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }
  void check_settings(const json& settings) const override {
    check_block_cache_settings(settings, transformer_config_.num_layers);
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const ImageRequest& first = batch.front();
    const int64_t factor = vae_config_.scale_factor();
    const int64_t max_sequence_length = batch_max_sequence_length(batch);
    // QwenImagePipeline runs the prompt under cache_context("cond") and true CFG's negative under "uncond": a step
    // cache state each, for this batch (diffusers and cache-dit reset theirs at every call).
    const BlockCaches caches(resolve_settings(info_.setting_specs, first.settings, "image settings", family_.label));
    use_loras(batch);
    c10::InferenceMode guard;
    const int64_t b = static_cast<int64_t>(batch.size());
    const std::vector<int64_t> cfg_rows = true_cfg_rows(batch);
    if (first.guidance_scale > 1.0 && static_cast<int64_t>(cfg_rows.size()) < b) warn_no_negative_once();
    const auto [cond, uncond] = embeds(batch, max_sequence_length);
    denoiser_phase();

    const int64_t h = 2 * (first.height / (factor * 2)), w = 2 * (first.width / (factor * 2));
    const std::vector<nn::TokenGrid> grid{{1, h / 2, w / 2}};  // img_shapes' (frames, h/2, w/2) of each image
    TimestepRequest steps;
    steps.sigmas = flow_match_linear_sigmas(first.steps);
    steps.mu = calculate_shift((h / 2) * (w / 2), scheduler_config_);  // image_seq_len
    scheduler_->set_timesteps(steps);
    const at::Tensor timesteps = scheduler_->timesteps();
    // img2img and inpainting (QwenImageImg2ImgPipeline, QwenImageInpaintPipeline): get_timesteps keeps
    // steps - int(steps - steps * strength) of them.
    const int64_t begin = first.image ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);

    at::Tensor latents;  // [B, (h/2)(w/2), 4C]
    std::vector<at::Generator> generators;
    PackedInpainting inpaint;  // inpainting: what each step blends back
    if (first.image) {
      // prepare_latents: each image encoded alone with a sample from its generator (_encode_vae_image), then
      // normalised per channel, (z - latents_mean) * (1 / latents_std) in the run dtype; then its noise from the
      // same generator, scale_noise to the first step's sigma, packed.
      vae_phase();  // --offload model: the VAE to the device to encode
      ImageStart start = image_start(
          batch,
          [&](const RgbImage& image, at::Generator& generator) {
            const at::Tensor z = sample_latent(vae_->encode(vae_input(image, dtype_, device_)), generator);
            return (z - latents_mean(z.options())) * inverse_latents_std(z.options());
          },
          dtype_, device_);
      denoiser_phase();
      latents = pack_latents(scheduler_->add_noise(start.image_latents, start.noise, begin));
      if (first.mask) inpaint = packed_inpainting(batch, start, h, w, at::TensorOptions().dtype(dtype_).device(device_));
      generators = std::move(start.generators);
    } else {
      // prepare_latents: [B, 1, C, h, w] noise from each image's generator, packed.
      BatchNoise noise = batch_noise(batch, vae_config_.z_dim, h, w, dtype_, device_);
      latents = pack_latents(noise.noise);
      generators = std::move(noise.generators);
    }
    at::Tensor rows;
    if (!cfg_rows.empty() && static_cast<int64_t>(cfg_rows.size()) < b)
      rows = at::tensor(cfg_rows, at::kLong).to(device_);

    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // timestep = t.expand(B).to(latents.dtype), passed as timestep / 1000 in that dtype
      const at::Tensor timestep = timesteps[begin + i].to(device_).expand({b}).to(latents.scalar_type()) / 1000;
      // kMasked: the text padding is no key, so an image depends only on its own prompt
      // (diffusers 0.36 attends to it; its goldens here record each prompt alone).
      at::Tensor pred = transformer_->forward(latents, cond.embeds, cond.mask, timestep, grids(b, grid), cond.lengths,
                                              QwenTextPadding::kMasked, caches.cond());
      if (!cfg_rows.empty()) {
        const at::Tensor x = rows.defined() ? latents.index_select(0, rows) : latents;
        const at::Tensor t = rows.defined() ? timestep.index_select(0, rows) : timestep;
        const at::Tensor neg = transformer_->forward(x, uncond.embeds, uncond.mask, t, grids(x.size(0), grid),
                                                     uncond.lengths, QwenTextPadding::kMasked,
                                                     caches.uncond());
        const at::Tensor text = rows.defined() ? pred.index_select(0, rows) : pred;
        // comb = neg + s (text - neg), rescaled to the text prediction's norm per token
        const at::Tensor comb = neg + first.guidance_scale * (text - neg);
        const at::Tensor cond_norm = at::linalg_vector_norm(text, 2, {-1}, /*keepdim=*/true);
        const at::Tensor comb_norm = at::linalg_vector_norm(comb, 2, {-1}, /*keepdim=*/true);
        const at::Tensor guided = comb * (cond_norm / comb_norm);
        pred = rows.defined() ? pred.index_copy(0, rows, guided) : guided;
      }
      latents = scheduler_->step(pred, i, latents, generators);
      if (inpaint.mask.defined())
        latents = blend_kept_region(*scheduler_, latents, inpaint.image, inpaint.noise, inpaint.mask, begin + i + 1);
    }
    caches.count_into(statistics_);  // the images of this batch, for the run summary
    throw_if_cancelled();

    // latents / (1 / std) + mean, per channel, in the VAE's dtype, as diffusers writes it
    at::Tensor z = unpack_latents(latents, h, w).to(dtype_);
    z = z / inverse_latents_std(z.options()) + latents_mean(z.options());
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W] in [-1, 1]
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override {
    embeds(batch, batch_max_sequence_length(batch));
  }

 private:
  /// The VAE config's latents_mean, [1, z_dim, 1, 1] in `options`: torch.tensor(list) (float32) .to(dtype).
  at::Tensor latents_mean(const at::TensorOptions& options) const {
    return at::tensor(vae_config_.latents_mean, at::kDouble).to(at::kFloat).to(options).view({1, -1, 1, 1});
  }
  /// 1.0 / latents_std, the reciprocal taken in `options`' dtype, as diffusers writes it.
  at::Tensor inverse_latents_std(const at::TensorOptions& options) const {
    return at::reciprocal(at::tensor(vae_config_.latents_std, at::kDouble).to(at::kFloat).to(options)).view({1, -1, 1, 1});
  }

  /// The batch's max_sequence_length setting, after the size check.
  int64_t batch_max_sequence_length(const std::vector<ImageRequest>& batch) const {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.scale_factor());
    const json settings = resolve_settings(info_.setting_specs, batch.front().settings, "image settings", family_.label);
    return settings["max_sequence_length"].get<int64_t>();
  }

  /// do_true_cfg: true_cfg_scale > 1 and a negative prompt (dpinfer's empty one is diffusers'
  /// None), decided per image so that an image never depends on its batch-mates: the rows that have it.
  static std::vector<int64_t> true_cfg_rows(const std::vector<ImageRequest>& batch) {
    std::vector<int64_t> rows;
    for (size_t i = 0; i < batch.size(); ++i)
      if (batch.front().guidance_scale > 1.0 && !batch[i].negative_prompt.empty())
        rows.push_back(static_cast<int64_t>(i));
    return rows;
  }

  /// The prompts' conditioning, and the negative prompts' of true_cfg_rows() (undefined when none).
  std::pair<TextConditioning, TextConditioning> embeds(const std::vector<ImageRequest>& batch,
                                                       int64_t max_sequence_length) {
    std::vector<std::string> prompts, negatives;
    for (const ImageRequest& r : batch) prompts.push_back(r.prompt);
    for (int64_t i : true_cfg_rows(batch)) negatives.push_back(batch[static_cast<size_t>(i)].negative_prompt);
    TextConditioning cond = encode(prompts, max_sequence_length, /*negative=*/false);
    if (negatives.empty()) return {cond, TextConditioning{}};
    return {cond, encode(negatives, max_sequence_length, /*negative=*/true)};
  }

  /// _get_qwen_prompt_embeds + encode_prompt for `texts`, each encoded alone (its states do not
  /// depend on the batch's padding) through the cache.
  TextConditioning encode(const std::vector<std::string>& texts, int64_t max_sequence_length, bool negative) {
    // The side is in the key only so that a truncation warning names the right one; the text
    // encoder takes no LoRA.
    const std::string key =
        std::string(negative ? "negative" : "prompt") + " max_sequence_length=" + std::to_string(max_sequence_length);
    std::vector<at::Tensor> states;  // each text's [L, D]
    for (std::vector<at::Tensor>& e : embeddings_.each(texts, key, [&](const std::string& text) {
           encoder_phase();
           return std::vector<at::Tensor>{encode_one(text, max_sequence_length, negative)};
         }))
      states.push_back(e[0]);
    TextConditioning out;
    int64_t longest = 0;
    for (const at::Tensor& state : states) {
      out.lengths.push_back(state.size(0));
      longest = std::max(longest, out.lengths.back());
    }
    const int64_t b = static_cast<int64_t>(texts.size());
    const int64_t width = states.front().size(1);
    out.embeds = at::zeros({b, longest, width}, at::TensorOptions().dtype(dtype_).device(device_));
    out.mask = at::zeros({b, longest}, at::TensorOptions().dtype(at::kLong).device(device_));
    for (int64_t i = 0; i < b; ++i) {
      const int64_t n = out.lengths[static_cast<size_t>(i)];
      out.embeds[i].narrow(0, 0, n).copy_(states[static_cast<size_t>(i)]);
      out.mask[i].narrow(0, 0, n).fill_(1);
    }
    return out;
  }

  /// One text's prompt embedding [L, D]: hidden_states[-1] of the templated text, less the
  /// first 34 tokens, cut to max_sequence_length.
  at::Tensor encode_one(const std::string& text, int64_t max_sequence_length, bool negative) {
    const std::string templated = kTemplateBefore + text + kTemplateAfter;
    const int max_tokens = kTokenizerMaxLength + static_cast<int>(kTemplateDrop);
    const Encoding e = tokenizer_->encode_unpadded(templated, max_tokens);
    warn_truncated(text, negative, e.dropped_tokens, max_tokens, "Qwen-Image's text encoder");
    const at::Tensor ids = at::tensor(e.ids, at::kLong).view({1, -1}).to(device_);
    const at::Tensor hidden = text_encoder_->hidden_state(ids, at::Tensor(), -1)[0];  // [L, D]
    const int64_t kept = hidden.size(0) - std::min(kTemplateDrop, hidden.size(0));
    if (kept == 0)
      throw Error("the templated prompt has " + std::to_string(hidden.size(0)) +
                  " tokens, no more than the 34 QwenImagePipeline drops; the tokenizer does not fit this model");
    const int64_t n = std::min(kept, max_sequence_length);
    if (n < kept)
      warn_truncated(text, negative, kept - n, static_cast<int>(max_sequence_length), "max_sequence_length");
    return hidden.narrow(0, kTemplateDrop, n).to(dtype_);
  }

  void warn_no_negative_once() {
    if (warned_no_negative_) return;
    warned_no_negative_ = true;
    log::warn("the guidance scale is above 1 but an image has no negative prompt: QwenImagePipeline applies "
              "true CFG only with one, so it runs without guidance (pass --negative-prompt \" \" to turn it on)");
  }

  const Family& family_;
  at::ScalarType dtype_;
  at::Device device_;
  QwenImageTransformerConfig transformer_config_;
  AutoencoderKLQwenImageConfig vae_config_;
  json scheduler_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<DecoderLLMTextEncoderImpl> text_encoder_;            // null while two-phase chunks release it,
  std::shared_ptr<QwenImageTransformer2DModelImpl> transformer_;  // and this one while the encoder runs
  std::shared_ptr<AutoencoderKLQwenImageImpl> vae_;
  PipelineInfo info_;
  bool warned_no_negative_ = false;
  json statistics_ = json::object();  ///< statistics(): First Block Cache's counts over the run
};

}  // namespace

std::array<int64_t, 2> qwen_image_default_size(const ModelDir& model) {
  const int64_t side = kQwenImageDefaultSampleSize * AutoencoderKLQwenImageConfig::from_json(model.at("vae").config).scale_factor();
  return {side, side};
}

void check_qwen_image_components(const ModelDir& md) {
  check_qwen_image_fit(QwenImageTransformerConfig::from_json(md.at("transformer").config),
            DecoderLLMConfig::qwen2_5_vl_from_json(md.at("text_encoder").config),
            AutoencoderKLQwenImageConfig::from_json(md.at("vae").config));
}

std::unique_ptr<TextToImage> load_qwen_image(const ModelDir& model, const LoadRequest& request, const Family& family) {
  return std::make_unique<QwenImagePipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

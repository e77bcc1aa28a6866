// Ref: diffusers/pipelines/stable_diffusion_xl/pipeline_stable_diffusion_xl.py StableDiffusionXLPipeline
// (diffusers 0.36; tools/fixtures/README.md lists the behaviours below with line numbers).
#include "dpinfer/pipeline/families/stable_diffusion_xl.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "unet_pipeline.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

/// What encode_prompt gives for one side (positive or negative) of a batch.
struct SdxlPromptEmbeds {
  at::Tensor hidden;  ///< [B, 77, D1 + D2]: both encoders' hidden states, side by side
  at::Tensor pooled;  ///< [B, projection_dim]: text_encoder_2's text_embeds
};

class StableDiffusionXLPipeline : public UNetPipeline {
 public:
  StableDiffusionXLPipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : UNetPipeline(md, r, family) {
    for (const char* name : {"tokenizer", "tokenizer_2"}) {
      const Component& tok = md.at(name);
      tokenizers_.push_back(find_tokenizer_class(tok.class_name)->load(tok.path));
    }
    const CLIPTextConfig te1 = CLIPTextConfig::from_json(md.at("text_encoder").config);
    const CLIPTextConfig te2 = CLIPTextConfig::from_json(md.at("text_encoder_2").config);
    te_layers_ = std::min(te1.num_hidden_layers, te2.num_hidden_layers);
    check_conditioning(te1, te2);
    force_zeros_for_empty_prompt_ = md.model_index.value("force_zeros_for_empty_prompt", true);
    resolve_settings_and_scheduler(md, r);

    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/true);
    load_text_encoder(md, "text_encoder_2", text_encoder_2_, options, /*lora=*/true);
    // needs_upcasting: an fp16 run decodes with the VAE in float32 when its config says
    // force_upcast. diffusers loads it in fp16 and then upcasts it, so its weights are
    // rounded through fp16 on the way here and the VAE computes exactly what diffusers' does.
    load_unet_and_vae(md, r, dtype_ == at::kHalf && vae_config_.force_upcast ? at::kFloat : dtype_);
    upcast_vae_encode_ = vae_config_.force_upcast;
  }

  void check_settings(const json& settings) const override {
    UNetPipeline::check_settings(settings);
    const int64_t clip_skip = settings.value("clip_skip", int64_t{0});
    if (clip_skip >= te_layers_)
      throw InputError("clip_skip " + std::to_string(clip_skip) + ": the text encoders have " +
                       std::to_string(te_layers_ + 1) + " hidden states and SDXL starts from the penultimate; use 0.." +
                       std::to_string(te_layers_ - 1));
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const Batch state = begin_batch(batch);
    use_loras(batch);
    c10::InferenceMode guard;
    const ImageRequest& first = batch.front();
    const int64_t b = static_cast<int64_t>(batch.size());

    const auto [cond, uncond] = embeds(batch, state);
    // add_time_ids: original size, crop top-left, target size; diffusers' defaults are the
    // image's own size and (0, 0), in the prompt embeddings' dtype.
    const std::vector<double> time_row{static_cast<double>(first.height), static_cast<double>(first.width), 0, 0,
                                       static_cast<double>(first.height), static_cast<double>(first.width)};
    at::Tensor time_ids =
        at::tensor(time_row, at::kDouble).to(cond.hidden.scalar_type()).view({1, 6}).expand({b, 6}).to(device_);
    at::Tensor hidden = cond.hidden, pooled = cond.pooled;
    if (state.cfg) {
      hidden = at::cat({uncond.hidden, cond.hidden});  // unconditional half first
      pooled = at::cat({uncond.pooled, cond.pooled});
      time_ids = at::cat({time_ids, time_ids});
    }
    const AddedConditioning added{pooled, time_ids};
    DenoiseInputs conditioning;
    conditioning.embeds = hidden;
    conditioning.added = &added;
    return denoise_and_decode(batch, state, conditioning,
                              [this](const at::Tensor& latents) { return unscale(latents.to(vae_dtype_)); });
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override { embeds(batch, begin_batch(batch)); }

 private:
  /// Both sides of a batch: the prompts', and with CFG the unconditional side (else undefined).
  std::pair<SdxlPromptEmbeds, SdxlPromptEmbeds> embeds(const std::vector<ImageRequest>& batch, const Batch& state) {
    SdxlPromptEmbeds cond = encode(batch, /*negative=*/false, state.settings["clip_skip"].get<int64_t>());
    return {cond, state.cfg ? negative_embeds(batch, cond) : SdxlPromptEmbeds{}};
  }

  /// The UNet's added conditioning must fit the encoders: diffusers' _get_add_time_ids check.
  void check_conditioning(const CLIPTextConfig& te1, const CLIPTextConfig& te2) const {
    if (unet_config_.addition_embed_type != UNetConfig::AdditionEmbedType::kTextTime)
      throw InputError("unet config: an SDXL UNet needs addition_embed_type text_time; this one has none");
    if (unet_config_.text_embeds_dim() != te2.projection_dim)
      throw InputError("unet config: projection_class_embeddings_input_dim " +
                       std::to_string(unet_config_.projection_class_embeddings_input_dim) + " expects a pooled " +
                       "embedding of " + std::to_string(unet_config_.text_embeds_dim()) +
                       " beside 6 * addition_time_embed_dim, but text_encoder_2's projection_dim is " +
                       std::to_string(te2.projection_dim) + "; the components do not belong together");
    for (size_t i = 0; i < unet_config_.cross_attention_dim.size(); ++i)
      if (unet_config_.cross_attention_dim[i] != te1.hidden_size + te2.hidden_size)
        throw InputError("unet config: cross_attention_dim " + std::to_string(unet_config_.cross_attention_dim[i]) +
                         " is not the two text encoders' widths together (" + std::to_string(te1.hidden_size) +
                         " + " + std::to_string(te2.hidden_size) + "); the components do not belong together");
  }

  /// The token ids of `texts` for tokenizer `k`, [N, max_length].
  at::Tensor token_ids(const std::vector<std::string>& texts, size_t k, bool negative) const {
    const Tokenizer& tok = *tokenizers_[k];
    const int max_len = tok.model_max_length();
    std::vector<int64_t> ids;
    for (const std::string& text : texts) {
      Encoding e = tok.encode(text, max_len);
      if (k == 0) warn_truncated(text, negative, e.dropped_tokens, max_len, "CLIP");
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    }
    return at::tensor(ids, at::kLong).view({static_cast<int64_t>(texts.size()), -1}).to(device_);
  }

  /// One side's embeddings of a batch through the cache: each distinct text not cached
  /// under this side and clip_skip is encoded once. New tensors: the caller may zero rows.
  SdxlPromptEmbeds encode(const std::vector<ImageRequest>& batch, bool negative, int64_t skip) {
    std::vector<std::string> texts;
    for (const ImageRequest& r : batch) texts.push_back(negative ? r.negative_prompt : r.prompt);
    // The side is in the key only so that a truncation warning names the right one.
    // The LoRAs merged into the text encoders change their output: they key the entries too.
    const std::string key = std::string(negative ? "negative" : "prompt") + " clip_skip=" + std::to_string(skip) +
                            " loras=" + lora_key("text_encoder") + ";" + lora_key("text_encoder_2");
    std::vector<at::Tensor> rows = embeddings_.rows(texts, key, [&](const std::vector<std::string>& distinct) {
      encoder_phase();
      SdxlPromptEmbeds e = encode_texts(distinct, negative, skip);
      return std::vector<at::Tensor>{e.hidden, e.pooled};
    });
    return {rows[0], rows[1]};
  }

  /// Ref: StableDiffusionXLPipeline.encode_prompt: hidden_states[-(skip + 2)] of both
  /// encoders without their final layer norm, side by side; the pooled embedding is
  /// text_encoder_2's projection. prompt_2 is the prompt itself.
  SdxlPromptEmbeds encode_texts(const std::vector<std::string>& texts, bool negative, int64_t skip) {
    at::Tensor h1 = text_encoder_->penultimate_hidden_state(token_ids(texts, 0, negative), skip);
    auto e2 = text_encoder_2_->encode_for_sdxl(token_ids(texts, 1, negative), skip);
    return {at::cat({h1, e2.hidden}, -1).to(dtype_), e2.text_embeds.to(dtype_)};
  }

  /// The unconditional side: zeros where the items set no negative prompt and the model
  /// says force_zeros_for_empty_prompt (an empty --negative-prompt is dpinfer's None),
  /// else the encoded negative prompts, always from the penultimate layer (diffusers
  /// applies clip_skip to the positive side only).
  SdxlPromptEmbeds negative_embeds(const std::vector<ImageRequest>& batch, const SdxlPromptEmbeds& cond) {
    bool all_empty = true, any_empty = false;
    for (const ImageRequest& r : batch) {
      all_empty = all_empty && r.negative_prompt.empty();
      any_empty = any_empty || r.negative_prompt.empty();
    }
    if (!force_zeros_for_empty_prompt_ || !any_empty) return encode(batch, /*negative=*/true, 0);
    if (all_empty) return {at::zeros_like(cond.hidden), at::zeros_like(cond.pooled)};
    // A batch mixing both kinds: each image as its own call would get it.
    SdxlPromptEmbeds encoded = encode(batch, /*negative=*/true, 0);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].negative_prompt.empty()) continue;
      encoded.hidden[static_cast<int64_t>(i)].zero_();
      encoded.pooled[static_cast<int64_t>(i)].zero_();
    }
    return encoded;
  }

  /// Latents in the VAE's space: latents * std / scaling_factor + mean when the config has
  /// latents_mean and latents_std, else latents / scaling_factor.
  at::Tensor unscale(const at::Tensor& latents) const {
    if (vae_config_.latents_mean && vae_config_.latents_std) {
      const auto options = at::TensorOptions().dtype(latents.scalar_type()).device(latents.device());
      at::Tensor mean = at::tensor(*vae_config_.latents_mean, at::kDouble).to(options).view({1, -1, 1, 1});
      at::Tensor std = at::tensor(*vae_config_.latents_std, at::kDouble).to(options).view({1, -1, 1, 1});
      return latents * std / vae_config_.scaling_factor + mean;
    }
    return latents / vae_config_.scaling_factor;
  }

  std::vector<std::unique_ptr<Tokenizer>> tokenizers_;
  int64_t te_layers_ = 0;
  bool force_zeros_for_empty_prompt_ = true;
  std::shared_ptr<CLIPTextModelImpl> text_encoder_;
  std::shared_ptr<CLIPTextModelWithProjectionImpl> text_encoder_2_;  // both null while two-phase chunks release them
};

}  // namespace

std::unique_ptr<TextToImage> load_stable_diffusion_xl(const ModelDir& model, const LoadRequest& request,
                                                      const Family& family) {
  return std::make_unique<StableDiffusionXLPipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

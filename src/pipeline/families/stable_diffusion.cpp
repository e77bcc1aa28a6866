// Ref: diffusers/pipelines/stable_diffusion/pipeline_stable_diffusion.py StableDiffusionPipeline
#include "dpinfer/pipeline/families/stable_diffusion.h"

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

class StableDiffusionPipeline : public UNetPipeline {
 public:
  StableDiffusionPipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : UNetPipeline(md, r, family) {
    const Component& tok = md.at("tokenizer");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);
    te_layers_ = CLIPTextConfig::from_json(md.at("text_encoder").config).num_hidden_layers;
    if (unet_config_.addition_embed_type != UNetConfig::AdditionEmbedType::kNone)
      throw InputError("unet config: addition_embed_type text_time belongs to SDXL, but model_index.json names a " +
                       md.model_index.value("_class_name", std::string()) + "; check the model");
    resolve_settings_and_scheduler(md, r);

    c10::InferenceMode guard;
    load_text_encoder(md, "text_encoder", text_encoder_, at::TensorOptions().dtype(dtype_).device(device_),
                      /*lora=*/true);
    load_unet_and_vae(md, r, dtype_);
  }

  void check_settings(const json& settings) const override {
    UNetPipeline::check_settings(settings);
    const int64_t clip_skip = settings.value("clip_skip", int64_t{0});
    if (clip_skip >= te_layers_)
      throw InputError("clip_skip " + std::to_string(clip_skip) + ": the text encoder has " +
                       std::to_string(te_layers_) + " layers; use 0.." + std::to_string(te_layers_ - 1));
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    const Batch state = begin_batch(batch);
    use_loras(batch);
    c10::InferenceMode guard;
    DenoiseInputs conditioning;
    conditioning.embeds = embeds(batch, state);
    return denoise_and_decode(batch, state, conditioning,
                              [this](const at::Tensor& latents) { return latents / vae_config_.scaling_factor; });
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override { embeds(batch, begin_batch(batch)); }

 private:
  /// The UNet's encoder_hidden_states: [B, 77, D], or [2B, 77, D] with CFG, unconditional first.
  at::Tensor embeds(const std::vector<ImageRequest>& batch, const Batch& state) {
    at::Tensor cond = encode(batch, /*negative=*/false, state.settings["clip_skip"].get<int64_t>());  // [B, 77, D]
    // The negative side is encoded without clip_skip, as diffusers does.
    return state.cfg ? at::cat({encode(batch, /*negative=*/true, 0), cond}) : cond;
  }

  /// One side's embeddings of a batch, [B, 77, D], through the cache: each distinct text
  /// not cached under this side and clip_skip is encoded once.
  at::Tensor encode(const std::vector<ImageRequest>& batch, bool negative, int64_t clip_skip) {
    std::vector<std::string> texts;
    for (const ImageRequest& r : batch) texts.push_back(negative ? r.negative_prompt : r.prompt);
    // The side is in the key only so that a truncation warning names the right one.
    // The LoRAs merged into the text encoder change its output: they key the entries too.
    const std::string key = std::string(negative ? "negative" : "prompt") + " clip_skip=" + std::to_string(clip_skip) +
                            " loras=" + lora_key("text_encoder");
    return embeddings_.rows(texts, key, [&](const std::vector<std::string>& distinct) {
      encoder_phase();
      return std::vector<at::Tensor>{encode_texts(distinct, negative, clip_skip)};
    })[0];
  }

  /// Ref: StableDiffusionPipeline.encode_prompt. [N, 77, D] for N texts.
  at::Tensor encode_texts(const std::vector<std::string>& texts, bool negative, int64_t clip_skip) {
    const int max_len = tokenizer_->model_max_length();
    std::vector<int64_t> ids;
    for (const std::string& text : texts) {
      Encoding e = tokenizer_->encode(text, max_len);
      warn_truncated(text, negative, e.dropped_tokens, max_len, "CLIP");
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    }
    at::Tensor t = at::tensor(ids, at::kLong).view({static_cast<int64_t>(texts.size()), -1}).to(device_);
    return text_encoder_->encode(t, clip_skip).to(dtype_);
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  int64_t te_layers_ = 0;
  std::shared_ptr<CLIPTextModelImpl> text_encoder_;  // null while two-phase chunks release it
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

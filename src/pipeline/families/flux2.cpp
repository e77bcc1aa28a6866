// Ref: diffusers/pipelines/flux2/pipeline_flux2_klein.py Flux2KleinPipeline and pipeline_flux2.py Flux2Pipeline
// (diffusers 0.37.0; they differ in the text path and in what guidance is, below): _get_qwen3_prompt_embeds,
// _get_mistral_3_small_prompt_embeds, format_input, _prepare_text_ids, _prepare_latent_ids, _pack_latents, _unpack_latents_with_ids,
// _unpatchify_latents, prepare_latents, compute_empirical_mu, __call__; with a reference image (`image`, one per
// item): Flux2ImageProcessor.check_image_input, _resize_to_target_area and _resize_and_crop, _encode_vae_image,
// _patchify_latents, _prepare_image_ids and prepare_image_latents. tools/fixtures/make_flux2_pipelines.py
// and make_flux2_dev_pipelines.py record their goldens, make_flux2_reference_goldens.py those with a reference.
#include "dpinfer/pipeline/families/flux2.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "denoising.h"
#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_flux2.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/pipeline/models/transformers/flux2_transformer.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/pipeline/text/qwen2_tokenizer.h"
#include "dpinfer/pipeline/text/tekken_tokenizer.h"
#include "dpinfer/util/error.h"
#include "lora_pipeline.h"
#include "pipeline_info.h"

namespace dpinfer::pipeline {

std::string flux2_klein_chat_prompt(const std::string& prompt) {
  return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
}

// Ref: pipeline_flux2.py format_input (the prompt without "[IMG]", one system and one user turn of text) and
// Mistral Small 3.1's chat template ({{- bos_token }}, the system turn, each user turn's text blocks in
// [INST]...[/INST]), rendered with add_generation_prompt=False; system_messages.py SYSTEM_MESSAGE.
std::string flux2_dev_chat_prompt(const std::string& prompt) {
  static const std::string kSystemMessage =
      "You are an AI that reasons about image descriptions. You give structured responses focusing on object "
      "relationships, object\nattribution and actions without speculation.";
  std::string text = prompt;
  for (size_t at = text.find("[IMG]"); at != std::string::npos; at = text.find("[IMG]", at)) text.erase(at, 5);
  return "<s>[SYSTEM_PROMPT]" + kSystemMessage + "[/SYSTEM_PROMPT][INST]" + text + "[/INST]";
}

namespace {

using nlohmann::json;

constexpr int64_t kFlux2DefaultSampleSize = 128;
/// Flux2ImageProcessor.check_image_input's defaults, and __call__'s cap on a reference's pixels.
constexpr int kReferenceMinSide = 64;
constexpr int kReferenceMaxAspectRatio = 8;
/// _prepare_image_ids(scale=10): reference k's tokens (from 0) have T = 10 + 10 k.
constexpr int64_t kReferenceTimeOffset = 10;

/// What [klein] and [dev] do differently before the transformer.
struct Flux2Model {
  std::string label;                 ///< for messages
  std::string encoder_name;          ///< for messages
  /// The prompt as the tokenizer sees it: the pipeline's chat template applied.
  std::string (*chat_prompt)(const std::string& prompt);
  /// The chat tokens the template writes, which the tokenizer must have.
  std::vector<std::string> chat_tokens;
  /// [dev]: guidance is the transformer's guidance input (a guidance-distilled model; no CFG). [klein]: CFG on ""
  /// for the Base models, nothing for the distilled ones.
  bool embedded_guidance;
};

// Flux2KleinPipeline: Qwen3 (the family row's text_encoder_out_layers: hidden states 9, 18 and 27).
const Flux2Model kKlein{"FLUX.2 [klein]", "Qwen3", flux2_klein_chat_prompt,
                        {"<|im_start|>", "<|im_end|>"}, /*embedded_guidance=*/false};
// Flux2Pipeline: Mistral Small 3.1 (hidden states 10, 20 and 30); __call__ passes guidance to the transformer.
const Flux2Model kDev{"FLUX.2 [dev]", "Mistral 3", flux2_dev_chat_prompt,
                      {"<s>", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"}, /*embedded_guidance=*/true};

const Flux2Model& flux2_model(const ModelDir& md) {
  return md.model_index.value("_class_name", "") == "Flux2Pipeline" ? kDev : kKlein;
}

/// The text encoder's config, as its class (the row's) reads it.
DecoderLLMConfig flux2_text_config(const ModelDir& md) {
  const json& config = md.at("text_encoder").config;
  return &flux2_model(md) == &kDev ? DecoderLLMConfig::mistral3_from_json(config)
                                   : DecoderLLMConfig::qwen3_from_json(config);
}

/// A tokenizer that answers token_id(): Qwen2's for [klein], Tekken for [dev].
struct Flux2Tokenizer {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::function<std::optional<int64_t>(const std::string&)> token_id;
};

Flux2Tokenizer flux2_tokenizer(const ModelDir& md) {
  const std::string& dir = md.at("tokenizer").path;
  if (&flux2_model(md) == &kDev) {
    auto t = std::make_shared<const TekkenTokenizer>(TekkenTokenizer::from_dir(dir));
    return {t, [t](const std::string& token) { return t->token_id(token); }};
  }
  auto t = std::make_shared<const Qwen2Tokenizer>(Qwen2Tokenizer::from_dir(dir));
  return {t, [t](const std::string& token) { return t->token_id(token); }};
}

/// _prepare_latent_ids / _prepare_image_ids: (t, row, column, 0) for each token of an h x w grid, row-major,
/// [h w, 4] int64; t is 0 for the image, 10, 20, ... for the references.
at::Tensor grid_ids(int64_t t, int64_t h, int64_t w, const at::TensorOptions& long_options) {
  at::Tensor ids = at::zeros({h * w, 4}, long_options);
  ids.select(1, 0).fill_(t);
  ids.select(1, 1).copy_(at::arange(h, long_options).repeat_interleave(w));
  ids.select(1, 2).copy_(at::arange(w, long_options).repeat({h}));
  return ids;
}

/// A request's references in order: its `image`, then its `more_images`.
/// text_encoder_out_layers (`layers`) against the text encoder and the transformer: as many hidden states as
/// joint_attention_dim holds, each one the text encoder has. `where` starts the message of a setting an item or the
/// run gave ("image settings"); empty for the model's own default, whose mismatch means foreign components.
void check_flux2_text_layers(const std::vector<int64_t>& layers, const std::string& where,
                             const Flux2TransformerConfig& t, const DecoderLLMConfig& text) {
  std::string list;
  for (size_t i = 0; i < layers.size(); ++i) list += (i ? ", " : "") + std::to_string(layers[i]);
  const std::string prefix = where.empty() ? "" : where + ": ";
  if (layers.empty() || t.joint_attention_dim != static_cast<int64_t>(layers.size()) * text.hidden_size)
    throw InputError(prefix + "transformer config: joint_attention_dim " + std::to_string(t.joint_attention_dim) +
                     " is not " + std::to_string(layers.size()) + " times the text encoder's hidden_size " +
                     std::to_string(text.hidden_size) + " (text_encoder_out_layers [" + list + "] stacks " +
                     std::to_string(layers.size()) + " of its hidden states); " +
                     (where.empty() ? "the components do not belong together"
                                    : "give as many layers as joint_attention_dim / hidden_size"));
  const int64_t deepest = *std::max_element(layers.begin(), layers.end());
  if (deepest > text.num_hidden_layers)
    throw InputError(prefix + "text_encoder config: num_hidden_layers " + std::to_string(text.num_hidden_layers) +
                     " is below " + std::to_string(deepest) + ", and text_encoder_out_layers [" + list +
                     "] reads hidden state " + std::to_string(deepest) +
                     (where.empty() ? "; the components do not belong together" : "; give layers it has"));
}

/// The family row's text_encoder_out_layers default.
std::vector<int64_t> default_text_layers(const Family& family) {
  const SettingSpec* spec = find_spec(family.settings, "text_encoder_out_layers");
  if (spec == nullptr) throw Error("FLUX.2: the family row has no text_encoder_out_layers setting");
  return spec->default_value.get<std::vector<int64_t>>();
}

/// check_flux2_components() on parsed configs, with the run's text_encoder_out_layers (`layers_from`: "--set"
/// when the run gave them, empty for the row's default; check_flux2_text_layers()'s `where`).
void check_flux2_fit(const Flux2Model& model, const std::vector<int64_t>& layers, const std::string& layers_from,
                     const Flux2TransformerConfig& t, const DecoderLLMConfig& text,
                     const AutoencoderKLFlux2Config& vae, const Flux2Tokenizer& tokenizer) {
  auto mismatch = [](const std::string& what) {
    throw InputError(what + "; the components do not belong together");
  };
  check_flux2_text_layers(layers, layers_from, t, text);
  if (t.in_channels != 4 * vae.kl.latent_channels || t.out_features() != t.in_channels)
    mismatch("transformer config: in_channels " + std::to_string(t.in_channels) + " and patch_size^2 * out_channels " +
             std::to_string(t.out_features()) + " must both be 4 * the VAE's latent_channels (" +
             std::to_string(4 * vae.kl.latent_channels) + ")");
  if (model.embedded_guidance && !t.guidance_embeds)
    throw InputError("transformer config: guidance_embeds is false, and " + model.label +
                     " passes its guidance scale to the transformer's guidance embedding; this transformer is not "
                     "FLUX.2 [dev]'s");
  const int64_t vocab = text.vocab_size;
  for (const std::string& token : model.chat_tokens) {
    const std::optional<int64_t> id = tokenizer.token_id(token);
    if (!id)
      throw InputError("tokenizer: it has no " + token + " token, which the chat template of " + model.label +
                       " needs; the tokenizer is not " + model.encoder_name + "'s");
    if (*id >= vocab)
      mismatch("tokenizer: " + token + " is id " + std::to_string(*id) + ", past the text encoder's vocab_size " +
               std::to_string(vocab));
  }
  if (tokenizer.tokenizer->pad_id() >= vocab)
    mismatch("tokenizer: the pad token is id " + std::to_string(tokenizer.tokenizer->pad_id()) +
             ", past the text encoder's vocab_size " + std::to_string(vocab));
}

class Flux2Pipeline : public LoraPipeline {
 public:
  Flux2Pipeline(const ModelDir& md, const LoadRequest& r, const Family& family)
      : family_(family),
        model_(flux2_model(md)),
        dtype_(parse_dtype(r.dtype)),
        device_(r.device),
        transformer_config_(Flux2TransformerConfig::from_json(md.at("transformer").config)),
        text_config_(flux2_text_config(md)),
        vae_config_(AutoencoderKLFlux2Config::from_json(md.at("vae").config)),
        tokenizer_(flux2_tokenizer(md)),
        scheduler_config_(md.at("scheduler").config),
        // Flux2KleinPipeline's register_to_config(is_distilled=...): model_index.json's, False when absent.
        is_distilled_(md.model_index.value("is_distilled", false) == true) {
    const json settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    // The run's text_encoder_out_layers: --set's (named so in a refusal), else the row's default.
    const std::vector<int64_t> layers = settings["text_encoder_out_layers"].get<std::vector<int64_t>>();
    const bool layers_given = r.settings.is_object() && r.settings.contains("text_encoder_out_layers");
    check_flux2_fit(model_, layers, layers_given ? "--set" : "", transformer_config_, text_config_, vae_config_,
                    tokenizer_);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});
    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/false);
    load_denoiser(md, "transformer", transformer_, options);
    if (r.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
    load_vae(md, "vae", vae_, options, r.vae_tiling);  // with diffusers' pipe.vae.enable_tiling() as asked
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, flux2_default_size(md));
    // check_inputs: height and width should be multiples of vae_scale_factor * 2 (16 for FLUX.2).
    info_.size_multiple = static_cast<int>(2 * vae_config_.kl.scale_factor());
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }

  // Ref: Flux2KleinPipeline.__call__, step 4 (process images).
  ReferenceSize reference_size(int width, int height, const json& settings) const override {
    (void)settings;
    // check_image_input, on the image as given
    const std::string size = std::to_string(width) + "x" + std::to_string(height);
    if (width < kReferenceMinSide || height < kReferenceMinSide)
      throw InputError("the reference image is " + size + ", and FLUX.2 takes references of at least " +
                       std::to_string(kReferenceMinSide) + " pixels a side (as diffusers' check_image_input); give a "
                       "larger image");
    if (std::max(static_cast<double>(width) / height, static_cast<double>(height) / width) > kReferenceMaxAspectRatio)
      throw InputError("the reference image is " + size + ", and FLUX.2 takes references at most " +
                       std::to_string(kReferenceMaxAspectRatio) + " times as long as wide (as diffusers' "
                       "check_image_input); crop it");
    // Over 1024^2 pixels: _resize_to_target_area, scale = sqrt(target / (w h)) in double, int() of each side.
    std::array<int, 2> resized{width, height};
    if (static_cast<int64_t>(width) * height > kFlux2ReferenceMaxPixels) {
      const double scale =
          std::sqrt(static_cast<double>(kFlux2ReferenceMaxPixels) / (static_cast<double>(width) * height));
      resized = {static_cast<int>(width * scale), static_cast<int>(height * scale)};
    }
    // Rounded down to vae_scale_factor * 2, then preprocess(resize_mode="crop"): the middle of the image.
    const int multiple = info_.size_multiple;
    return {resized, {resized[0] / multiple * multiple, resized[1] / multiple * multiple}};
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    return generate_by_reference_size(batch, [this](const std::vector<ImageRequest>& part) {
      return generate_one_size(part);
    });
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override {
    const TextSettings text = text_settings(batch);
    encode(prompts(batch), text);
    if (uses_cfg(batch.front().guidance_scale)) encode(std::vector<std::string>(batch.size(), ""), text);
  }

 private:
  /// generate() for a batch whose references, if any, are of one size.
  std::vector<RgbImage> generate_one_size(const std::vector<ImageRequest>& batch) {
    const ImageRequest& first = batch.front();
    const TextSettings text = text_settings(batch);
    use_loras(batch);  // Flux2LoraLoaderMixin: the transformer's (fused, as fuse_lora merges them)
    c10::InferenceMode guard;
    const auto b = static_cast<int64_t>(batch.size());
    const double guidance = first.guidance_scale;
    const bool cfg = uses_cfg(guidance);
    const at::Tensor prompt_embeds = encode(prompts(batch), text);  // [B, L, 3 D]
    at::Tensor negative_embeds;
    if (cfg) negative_embeds = encode(std::vector<std::string>(batch.size(), ""), text);
    denoiser_phase();

    // _prepare_text_ids: (0, 0, 0, l) per token; the transformer reads the first item's.
    const int64_t text_len = prompt_embeds.size(1);
    const auto long_options = at::TensorOptions().dtype(at::kLong).device(device_);
    at::Tensor text_ids = at::zeros({text_len, 4}, long_options);
    text_ids.select(1, 3).copy_(at::arange(text_len, long_options));

    // prepare_latents: noise [B, 4C, H / 2f, W / 2f] in the prompt embeddings' dtype from each image's generator
    // (already 2x2-patchified), its ids (0, row, column, 0), packed to [B, h w, 4C] as a permuted view.
    const int64_t f2 = 2 * vae_config_.kl.scale_factor();
    const int64_t h = first.height / f2, w = first.width / f2;
    const int64_t channels = transformer_config_.in_channels;
    BatchNoise noise = batch_noise(batch, channels, h, w, prompt_embeds.scalar_type(), device_);
    at::Tensor latents = noise.noise.reshape({b, channels, h * w}).permute({0, 2, 1});  // [B, h w, 4C]
    at::Tensor image_ids = grid_ids(0, h, w, long_options);
    // The references (prepare_image_latents): each encoded alone in the VAE's dtype, the distribution's mean
    // (sample_mode="argmax": nothing drawn from the generator), patchified, normalised by bn's statistics,
    // packed [1, hr wr, 4C] and joined in order, [B, Lr, 4C], to follow the latents in the sequence, with ids
    // (10 + 10 k, row, column, 0) for reference k. Every request of the part has references of the same sizes
    // (generate_by_reference_size), so the first's make the ids.
    at::Tensor reference_latents;
    if (first.image) {
      vae_phase();  // --offload model: the VAE to the device to encode
      std::vector<at::Tensor> rows;
      for (const ImageRequest& r : batch) {
        std::vector<at::Tensor> packed;
        for (const RgbImage* reference : references_of(r)) {
          const at::Tensor z =
              vae_->normalize(AutoencoderKLFlux2Impl::patchify(vae_->encode(vae_input(*reference, dtype_, device_)).mean));
          packed.push_back(z.reshape({1, z.size(1), -1}).permute({0, 2, 1}));  // [1, hr wr, 4C]
        }
        rows.push_back(at::cat(packed, 1));
      }
      denoiser_phase();
      reference_latents = at::cat(rows);
      std::vector<at::Tensor> ids{image_ids};  // torch.cat([latent_ids, image_latent_ids], dim=1)
      int64_t t = kReferenceTimeOffset;
      for (const RgbImage* reference : references_of(first)) {
        ids.push_back(grid_ids(t, reference->height / f2, reference->width / f2, long_options));
        t += kReferenceTimeOffset;
      }
      image_ids = at::cat(ids);
    }

    // sigmas np.linspace(1, 1 / N, N) (None with use_flow_sigmas), mu = compute_empirical_mu(h w, N).
    TimestepRequest steps;
    if (scheduler_config_.value("use_flow_sigmas", false))
      steps.steps = first.steps;
    else
      steps.sigmas = flow_match_linear_sigmas(first.steps);  // retrieve_timesteps(sigmas=...) passes no step count
    steps.mu = compute_empirical_mu(h * w, first.steps);
    scheduler_->set_timesteps(steps);
    const at::Tensor timesteps = scheduler_->timesteps();
    // [dev]: torch.full([1], guidance_scale, dtype=float32).expand(B), the transformer's guidance input.
    at::Tensor guidance_input;
    if (model_.embedded_guidance) guidance_input = at::full({b}, guidance, at::TensorOptions().dtype(at::kFloat).device(device_));

    // --cuda-graphs (nn/cuda_graphs.h): the transformer's weights for this batch's calls. Every input of a call is a
    // tensor on the device (the ids too), and the forward reads nothing back from the device. FLUX.2 takes no step
    // cache.
    const uint64_t weights = nn::denoiser_weights(graphs_.get(), *transformer_);
    // One transformer call (the prompt's, or CFG's negative without the guidance input): eager, or replayed from its
    // CUDA graph (the same kernels).
    const auto transformer = [&](const at::Tensor& input, const at::Tensor& embeds, const at::Tensor& timestep,
                                 const at::Tensor& guidance_in, const char* context) {
      return nn::run_denoiser(graphs_.get(), {input, embeds, timestep, image_ids, text_ids, guidance_in},
                              std::string(context) + "/" + lora_key("transformer"), weights,
                              [&](const std::vector<at::Tensor>& v) {
                                return transformer_->forward(v[0], v[1], v[2], v[3], v[4], v[5]);
                              });
    };
    for (int64_t i = 0; i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // timestep = t.expand(B).to(latents.dtype), passed as timestep / 1000 in that dtype
      const at::Tensor timestep = timesteps[i].to(device_).expand({b}).to(latents.scalar_type()) / 1000;
      // With references: cat([latents, image_latents], 1).to(transformer dtype), and the prediction for the
      // latents' tokens only (noise_pred[:, :latents.size(1)]).
      const at::Tensor input = (reference_latents.defined() ? at::cat({latents, reference_latents}, 1) : latents).to(dtype_);
      const int64_t tokens = latents.size(1);
      at::Tensor pred = transformer(input, prompt_embeds, timestep, guidance_input, "cond").narrow(1, 0, tokens);
      if (cfg) {
        const at::Tensor neg =
            transformer(input, negative_embeds, timestep, at::Tensor(), "uncond").narrow(1, 0, tokens);
        pred = neg + guidance * (pred - neg);
      }
      latents = scheduler_->step(pred, i, latents, noise.generators);
    }
    nn::count_graphs_into(graphs_.get(), statistics_);
    throw_if_cancelled();

    // _unpack_latents_with_ids: each token back to (row, column); then the bn statistics, the 2x2 unpatchify
    // and the decode, in the latents' dtype. Each image is decoded alone (diffusers' vae.enable_slicing()):
    // the latents do not depend on the batch, but a bfloat16 decode of a batch rounds apart from its images
    // decoded alone (diffusers' own batch of 3 by up to 2 uint8 steps, make_flux2_pipelines.py's
    // batch_vs_single_checks), and an image must not depend on its batch-mates.
    at::Tensor z = latents.reshape({b, h, w, channels}).permute({0, 3, 1, 2}).contiguous();  // [B, 4C, h, w]
    vae_phase();  // --offload model: the VAE to the device to decode
    z = AutoencoderKLFlux2Impl::unpatchify(vae_->unnormalize(z)).to(dtype_);                 // [B, C, 2h, 2w]
    std::vector<at::Tensor> images;
    for (int64_t i = 0; i < b; ++i) images.push_back(vae_->decode(z.narrow(0, i, 1)));
    return to_rgb(at::cat(images));  // [B, 3, H, W]
  }

  /// The settings that reach the text encoder: the chat prompt's length and the hidden states stacked.
  struct TextSettings {
    int max_length;
    std::vector<int64_t> layers;
  };
  TextSettings text_settings(const std::vector<ImageRequest>& batch) const {
    const json settings = batch_settings(batch);
    TextSettings out{settings["max_sequence_length"].get<int>(),
                     settings["text_encoder_out_layers"].get<std::vector<int64_t>>()};
    check_flux2_text_layers(out.layers, "image settings", transformer_config_, text_config_);
    return out;
  }

  /// do_classifier_free_guidance: [klein]'s Base models above guidance 1, the negative side "". [dev] never.
  bool uses_cfg(double guidance) const { return !model_.embedded_guidance && guidance > 1.0 && !is_distilled_; }

  /// The batch's settings, after the size and negative-prompt checks.
  json batch_settings(const std::vector<ImageRequest>& batch) const {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.kl.scale_factor());
    for (const ImageRequest& r : batch)
      if (!r.negative_prompt.empty())
        throw InputError(model_.embedded_guidance
                             ? "FLUX.2 [dev] takes no negative prompt: Flux2Pipeline has no CFG (its guidance scale "
                               "goes to the guidance-distilled transformer); drop the negative prompt"
                             : "FLUX.2 [klein] takes no negative prompt: Flux2KleinPipeline's CFG (the Base models, "
                               "guidance above 1) runs on the empty prompt; drop the negative prompt");
    return resolve_settings(info_.setting_specs, batch.front().settings, "image settings", family_.label);
  }

  static std::vector<std::string> prompts(const std::vector<ImageRequest>& batch) {
    std::vector<std::string> texts;
    for (const ImageRequest& r : batch) texts.push_back(r.prompt);
    return texts;
  }

  /// _get_qwen3_prompt_embeds ([klein]) and _get_mistral_3_small_prompt_embeds ([dev]): each text in the chat
  /// template, padded to max_length (truncated past it) on the tokenizer's padding side, the text encoder's three
  /// hidden states with the attention mask, each token's three states side by side: [N, max_length, 3 hidden],
  /// every token kept (padding too). The batch's distinct texts in one call, as diffusers encodes a batch,
  /// through the cache.
  at::Tensor encode(const std::vector<std::string>& texts, const TextSettings& settings) {
    const int max_length = settings.max_length;
    std::string key = "max_sequence_length=" + std::to_string(max_length) + " text_encoder_out_layers=";
    for (int64_t layer : settings.layers) key += std::to_string(layer) + ",";
    return embeddings_.rows(texts, key, [&](const std::vector<std::string>& distinct) {
      encoder_phase();
      std::vector<int64_t> ids, mask;
      for (const std::string& text : distinct) {
        const Encoding e = tokenizer_.tokenizer->encode(model_.chat_prompt(text), max_length);
        warn_truncated(text, /*negative=*/false, e.dropped_tokens, max_length, model_.encoder_name);
        ids.insert(ids.end(), e.ids.begin(), e.ids.end());
        mask.insert(mask.end(), e.attention_mask.begin(), e.attention_mask.end());
      }
      const auto n = static_cast<int64_t>(distinct.size());
      const at::Tensor id_t = at::tensor(ids, at::kLong).view({n, -1}).to(device_);
      const at::Tensor mask_t = at::tensor(mask, at::kLong).view({n, -1}).to(device_);
      // stack(dim=1).permute(0, 2, 1, 3).reshape(N, L, 3 D): per token, the three states one after another
      return std::vector<at::Tensor>{at::cat(text_encoder_->hidden_states(id_t, mask_t, settings.layers), -1)};
    })[0];  // [B, L, 3 D]
  }

  const Family& family_;
  const Flux2Model& model_;
  at::ScalarType dtype_;
  at::Device device_;
  Flux2TransformerConfig transformer_config_;
  DecoderLLMConfig text_config_;
  AutoencoderKLFlux2Config vae_config_;
  Flux2Tokenizer tokenizer_;
  json scheduler_config_;
  bool is_distilled_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<DecoderLLMTextEncoderImpl> text_encoder_;     // null while two-phase chunks release it,
  std::shared_ptr<Flux2Transformer2DModelImpl> transformer_;  // and this one while the encoder runs
  std::shared_ptr<AutoencoderKLFlux2Impl> vae_;
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
  PipelineInfo info_;
  json statistics_ = json::object();  ///< statistics(): the graphs' counts over the run
};

}  // namespace

std::array<int64_t, 2> flux2_default_size(const ModelDir& model) {
  const int64_t side =
      kFlux2DefaultSampleSize * AutoencoderKLFlux2Config::from_json(model.at("vae").config).kl.scale_factor();
  return {side, side};
}

void check_flux2_components(const ModelDir& md) {
  check_flux2_fit(flux2_model(md), default_text_layers(*md.family), "",
                  Flux2TransformerConfig::from_json(md.at("transformer").config),
                  flux2_text_config(md), AutoencoderKLFlux2Config::from_json(md.at("vae").config), flux2_tokenizer(md));
}

ReferenceFacts flux2_reference_facts(const std::string&, const nlohmann::json&, int64_t) {
  // __call__'s `image`: references the model edits, not the start of img2img, a list of them each with its own ids
  // (10, 20, ...), resized to at most 1024^2; step 4: height = height or image_height (the first reference's).
  ReferenceFacts facts;
  facts.references = true;
  facts.max_pixels = kFlux2ReferenceMaxPixels;
  facts.sets_item_size = true;
  facts.several = true;
  return facts;
}

std::unique_ptr<TextToImage> load_flux2(const ModelDir& model, const LoadRequest& request, const Family& family) {
  return std::make_unique<Flux2Pipeline>(model, request, family);
}

}  // namespace dpinfer::pipeline

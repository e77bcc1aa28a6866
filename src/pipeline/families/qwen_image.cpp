// Ref: diffusers/pipelines/qwenimage/pipeline_qwenimage.py QwenImagePipeline (diffusers 0.36):
// _get_qwen_prompt_embeds, encode_prompt, prepare_latents, _pack_latents, _unpack_latents and
// __call__ (the true-CFG loop and the decode); pipeline_qwenimage_img2img.py and pipeline_qwenimage_inpaint.py
// (_encode_vae_image, prepare_latents, prepare_mask_latents, get_timesteps and the inpainting blend) for items
// that start from an image (issue 29); pipeline_qwenimage_edit.py QwenImageEditPipeline (calculate_dimensions,
// _get_qwen_prompt_embeds with the image, _encode_vae_image, prepare_latents and the loop's reference tokens) for a
// folder whose model_index.json names it (issue 29, item 5).
#include "dpinfer/pipeline/families/qwen_image.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string_view>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "block_caches.h"
#include "dpinfer/io/image_resize.h"
#include "denoising.h"
#include "flux_latents.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image_config.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_config.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer.h"
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer_config.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"
#include "dpinfer/pipeline/models/vision/qwen2_vl_image_processor.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
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

// QwenImageEditPipeline.prompt_template_encode before its "{}", less the image's vision tokens that open the user turn
// (QwenImageEditPlusPipeline's template is this, its "{}" holding "Picture N: " and the vision tokens of each image).
// The processor expands each <|image_pad|> into its image's tokens (Qwen2VLProcessor.__call__).
constexpr const char* kEditTemplateBefore =
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new image "
    "that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n";
constexpr const char* kVisionTokens = "<|vision_start|><|image_pad|><|vision_end|>";
// prompt_template_encode_start_idx of the Edit pipeline: the states of the first 64 tokens are dropped (the system
// turn, the user turn's opening and the first of the image's tokens, whatever the image).
constexpr int64_t kEditTemplateDrop = 64;
// calculate_dimensions(1024 * 1024, ratio): the pixel count the Edit pipelines size an input image to for the VAE
// (VAE_IMAGE_SIZE), and the Edit Plus pipeline (CONDITION_IMAGE_SIZE) for the vision tower.
constexpr double kEditTargetArea = 1024.0 * 1024.0;
constexpr double kEditPlusConditionArea = 384.0 * 384.0;

/// One side (prompts or negative prompts) of a batch as the transformer takes it.
struct TextConditioning {
  at::Tensor embeds;             ///< [B, L, D]: each text's states, zero-padded to the longest
  at::Tensor mask;               ///< [B, L] int64: 1 for a text token, 0 for padding
  std::vector<int64_t> lengths;  ///< each text's token count (diffusers' txt_seq_lens)
};

/// Texts' states ([L_i, D] each) zero-padded to the longest, with their mask and lengths.
TextConditioning conditioning(const std::vector<at::Tensor>& states, const at::TensorOptions& options) {
  TextConditioning out;
  int64_t longest = 0;
  for (const at::Tensor& state : states) {
    out.lengths.push_back(state.size(0));
    longest = std::max(longest, out.lengths.back());
  }
  const int64_t b = static_cast<int64_t>(states.size());
  out.embeds = at::zeros({b, longest, states.front().size(1)}, options);
  out.mask = at::zeros({b, longest}, options.dtype(at::kLong));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = out.lengths[static_cast<size_t>(i)];
    out.embeds[i].narrow(0, 0, n).copy_(states[static_cast<size_t>(i)]);
    out.mask[i].narrow(0, 0, n).fill_(1);
  }
  return out;
}

/// The Edit pipelines' calculate_dimensions(area, width / height): {width, height}, each sqrt-scaled to the area and
/// rounded to a multiple of 32 (Python's round, half to even).
std::array<int, 2> edit_dimensions(int width, int height, double area = kEditTargetArea) {
  const double ratio = static_cast<double>(width) / height;
  const double w = std::sqrt(area * ratio);
  const double h = w / ratio;
  return {static_cast<int>(std::nearbyint(w / 32) * 32), static_cast<int>(std::nearbyint(h / 32) * 32)};
}

/// A cache key for images' pixels: the prompt cache holds an Edit prompt's states per (text, images). 64 bits of
/// std::hash over each image's bytes, with its size; within one process, a clash among the cache's 64 entries is
/// about 2^-58.
std::string image_key(const std::vector<const RgbImage*>& images) {
  std::string key;
  for (const RgbImage* image : images) {
    const std::string_view bytes(reinterpret_cast<const char*>(image->pixels.data()), image->pixels.size());
    key += " " + std::to_string(image->width) + "x" + std::to_string(image->height) + ":" +
           std::to_string(std::hash<std::string_view>{}(bytes));
  }
  return key;
}

/// `image` resized with Pillow's Lanczos to `size` {width, height}, as VaeImageProcessor.resize does.
RgbImage resized(const RgbImage& image, const std::array<int, 2>& size) {
  if (image.width == size[0] && image.height == size[1]) return image;
  const io::RgbImageData out = io::resize_lanczos(io::RgbImageData{image.width, image.height, image.pixels}, size[0],
                                                  size[1]);
  RgbImage r;
  r.width = out.width;
  r.height = out.height;
  r.pixels = out.pixels;
  return r;
}

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
    const std::string pipeline_class = md.model_index.value("_class_name", std::string());
    // The Edit classes are those whose images are references (qwen_image_reference_facts); Plus takes several.
    const ReferenceFacts references = qwen_image_reference_facts(pipeline_class, json::object(), 0);
    edit_ = references.references;
    plus_ = references.several;
    // The Edit pipeline tokenizes with its processor's tokenizer (self.processor(text=..., images=...)).
    if (edit_ && !md.find("processor"))
      throw InputError(md.root + "/model_index.json: " + pipeline_class + " without a processor component (the "
                       "Qwen2VLProcessor whose image processor feeds the vision tower); add the model's processor/ "
                       "folder");
    const Component& tok = md.at(edit_ ? "processor" : "tokenizer");
    tokenizer_ = find_tokenizer_class(tok.class_name)->load(tok.path);
    if (edit_) image_processor_ = Qwen2VLImageProcessorConfig::from_file(tok.path + "/preprocessor_config.json");

    json settings = resolve_settings(family_.settings, r.settings, "--set", family_.label);
    scheduler_ = make_scheduler(scheduler_config_, SchedulerRequest{r.scheduler, 0.0, family_.scheduler_rewrite,
                                                                    family_.prediction});

    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(dtype_).device(device_);
    start_components(family_, r);
    // QwenImageLoraLoaderMixin: the transformer only.
    load_text_encoder(md, "text_encoder", text_encoder_, options, /*lora=*/false);
    // The Edit pipeline's vision tower: Qwen2_5_VLForConditionalGeneration's visual.* weights, an encoder beside the
    // text path (released and brought back with it).
    if (edit_) {
      const std::vector<Component> vision = qwen_image_derived_components(md);
      if (vision.empty())
        throw InputError("the Qwen-Image-Edit vision tower is read from the text_encoder folder, not from the "
                         "single-file checkpoint " + md.at("text_encoder").single_file + "; give the model's folder");
      load_text_encoder(vision.front(), visual_, options);
    }
    load_denoiser(md, "transformer", transformer_, options);
    if (r.cuda_graphs) graphs_ = std::make_unique<nn::DenoiserGraphs>();
    load_vae(md, "vae", vae_, options, r.vae_tiling);  // with diffusers' pipe.vae.enable_tiling() as asked
    info_ = pipeline_info(md, r, family_, scheduler_->name(), settings, qwen_image_default_size(md));
    // check_inputs: height and width must be multiples of vae_scale_factor * 2 (16 for Qwen-Image).
    info_.size_multiple = static_cast<int>(2 * vae_config_.scale_factor());
    if (edit_) {
      // No max_sequence_length: the Edit pipeline cuts nothing (below), so it is no setting of these models, neither in
      // a line nor in the record.
      std::vector<SettingSpec>& specs = info_.setting_specs;
      specs.erase(std::remove_if(specs.begin(), specs.end(),
                                 [](const SettingSpec& spec) { return spec.name == "max_sequence_length"; }),
                  specs.end());
      info_.settings.erase("max_sequence_length");
      if (r.settings.contains("max_sequence_length"))
        throw InputError("--set max_sequence_length: " + info_.pipeline_class +
                         " does not cut the prompt's states (diffusers 0.36 ignores the argument), so neither does "
                         "dpinfer; drop the setting");
    }
  }

  // Ref: QwenImageEditPipeline.__call__: calculate_dimensions(1024 * 1024, image width / height), then
  // image_processor.resize to it (Lanczos), nothing cut. QwenImageEditPlusPipeline resizes each image twice from its
  // own size (for the vision tower and for the VAE), so it takes the image as it is and resizes it itself.
  ReferenceSize reference_size(int width, int height, const json& settings) const override {
    (void)settings;
    const std::array<int, 2> size = edit_dimensions(width, height);
    const std::array<int, 2> condition = edit_dimensions(width, height, kEditPlusConditionArea);
    if (size[0] < 32 || size[1] < 32 || (plus_ && (condition[0] < 32 || condition[1] < 32)))
      throw InputError("the input image is " + std::to_string(width) + "x" + std::to_string(height) +
                       ", too narrow for the Qwen-Image-Edit pipelines' references (a side rounds to 0 of 32 pixels); "
                       "give an image with an aspect ratio nearer 1:1");
    if (plus_) return {{width, height}, {width, height}, size};
    return {size, size};
  }

  const PipelineInfo& info() const override { return info_; }
  json statistics() const override { return statistics_; }
  void check_settings(const json& settings) const override {
    check_block_cache_settings(settings, transformer_config_.num_layers);
  }

  std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) override {
    if (batch.empty()) return {};
    if (edit_)
      return generate_by_reference_size(batch, [this](const std::vector<ImageRequest>& part) {
        return generate_one_size(part);
      });
    return generate_one_size(batch);
  }

 protected:
  void encode_prompts(const std::vector<ImageRequest>& batch) override {
    // An Edit item without its image is generate()'s to refuse, item by item: nothing to encode ahead for it.
    if (edit_ && std::any_of(batch.begin(), batch.end(), [](const ImageRequest& r) { return !r.image; })) return;
    embeds(batch, batch_max_sequence_length(batch));
  }

 private:
  /// generate() for a batch whose references, if any, are of one size.
  std::vector<RgbImage> generate_one_size(const std::vector<ImageRequest>& batch) {
    const ImageRequest& first = batch.front();
    if (edit_) check_edit_items(batch);
    const int64_t factor = vae_config_.scale_factor();
    const int64_t max_sequence_length = batch_max_sequence_length(batch);
    // QwenImagePipeline runs the prompt under cache_context("cond") and true CFG's negative under "uncond": a step
    // cache state each, for this batch (diffusers and cache-dit reset theirs at every call).
    const BlockCaches caches(resolve_settings(info_.setting_specs, first.settings, "image settings", family_.label));
    nn::check_no_step_cache(graphs_.get(), caches.cond() || caches.uncond());
    use_loras(batch);
    c10::InferenceMode guard;
    const int64_t b = static_cast<int64_t>(batch.size());
    const std::vector<int64_t> cfg_rows = true_cfg_rows(batch);
    if (first.guidance_scale > 1.0 && static_cast<int64_t>(cfg_rows.size()) < b) warn_no_negative_once();
    const auto [cond, uncond] = embeds(batch, max_sequence_length);
    denoiser_phase();

    const int64_t h = 2 * (first.height / (factor * 2)), w = 2 * (first.width / (factor * 2));
    std::vector<nn::TokenGrid> grid{{1, h / 2, w / 2}};  // img_shapes' (frames, h/2, w/2) of each image
    TimestepRequest steps;
    steps.sigmas = flow_match_linear_sigmas(first.steps);
    steps.mu = calculate_shift((h / 2) * (w / 2), scheduler_config_);  // image_seq_len
    scheduler_->set_timesteps(steps);
    const at::Tensor timesteps = scheduler_->timesteps();
    // img2img and inpainting (QwenImageImg2ImgPipeline, QwenImageInpaintPipeline): get_timesteps keeps
    // steps - int(steps - steps * strength) of them.
    const int64_t begin =
        first.image && !edit_ ? img2img_start(first.steps, first.strength, StrengthRounding::kFloatSteps) : 0;
    scheduler_->set_begin_index(begin);

    at::Tensor latents;  // [B, (h/2)(w/2), 4C]
    std::vector<at::Generator> generators;
    PackedInpainting inpaint;  // inpainting: what each step blends back
    if (first.image && !edit_) {
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
    // The Edit pipeline's reference (QwenImageEditPipeline.prepare_latents): each image encoded alone,
    // _encode_vae_image's retrieve_latents(sample_mode="argmax"), the mean, which draws nothing from the generator;
    // then (z - latents_mean) / latents_std in the run dtype, packed [B, Lr, 4C] to follow the latents in the
    // sequence, with img_shapes' second entry (1, rh/2, rw/2).
    at::Tensor reference_latents;
    if (edit_) {
      // Edit Plus: each reference resized to calculate_dimensions(VAE_IMAGE_SIZE, its ratio) from its own size, and
      // their packed latents joined in order (prepare_latents' torch.cat(all_image_latents, dim=1)).
      std::vector<at::Tensor> rows;  // each request's [1, sum Lr, 4C]
      vae_phase();  // --offload model: the VAE to the device to encode
      for (const ImageRequest& r : batch) {
        std::vector<at::Tensor> packed;
        for (const RgbImage* reference : references_of(r)) {
          const RgbImage image = plus_ ? resized(*reference, edit_dimensions(reference->width, reference->height))
                                       : *reference;
          const at::Tensor z = vae_->encode(vae_input(image, dtype_, device_)).mean;
          packed.push_back(pack_latents((z - latents_mean(z.options())) / latents_std(z.options())));
          if (&r == &batch.front()) grid.push_back({1, z.size(2) / 2, z.size(3) / 2});
        }
        rows.push_back(at::cat(packed, 1));
      }
      denoiser_phase();
      reference_latents = at::cat(rows);
    }
    at::Tensor rows;
    if (!cfg_rows.empty() && static_cast<int64_t>(cfg_rows.size()) < b)
      rows = at::tensor(cfg_rows, at::kLong).to(device_);

    // --cuda-graphs (nn/cuda_graphs.h): the transformer's weights for this batch's calls, and the host inputs a
    // capture keeps in the context: the token grids (the latents' and each reference's, the MSRoPE positions; two
    // Edit Plus batches may hold as many tokens in other grids). The text lengths only check the call (the mask
    // carries them). The forward reads nothing back from the device, and its MSRoPE tables reach the device at the
    // first call, a warm-up before any capture (QwenImageTransformer2DModelImpl::forward, nn::MSRope).
    const uint64_t weights = nn::denoiser_weights(graphs_.get(), *transformer_);
    std::string call_key = "/" + lora_key("transformer") + "/grids";
    for (const nn::TokenGrid& g : grid)
      call_key += " " + std::to_string(g.frames) + "x" + std::to_string(g.height) + "x" + std::to_string(g.width);
    // One transformer call: eager, or replayed from its CUDA graph (the same kernels). kMasked: the text padding
    // is no key, so an image depends only on its own prompt (diffusers 0.36 attends to it; its goldens here record
    // each prompt alone).
    const auto transformer = [&](const at::Tensor& x, const TextConditioning& text, const at::Tensor& t,
                                 nn::BlockCache* cache, const char* context) {
      return nn::run_denoiser(graphs_.get(), {x, text.embeds, text.mask, t}, context + call_key, weights,
                              [&](const std::vector<at::Tensor>& v) {
                                return transformer_->forward(v[0], v[1], v[2], v[3], grids(v[0].size(0), grid),
                                                             text.lengths, QwenTextPadding::kMasked, cache);
                              });
    };
    for (int64_t i = 0; begin + i < timesteps.size(0); ++i) {
      throw_if_cancelled();
      // timestep = t.expand(B).to(latents.dtype), passed as timestep / 1000 in that dtype
      const at::Tensor timestep = timesteps[begin + i].to(device_).expand({b}).to(latents.scalar_type()) / 1000;
      // Edit: the reference's tokens after the latents' (torch.cat([latents, image_latents], dim=1)), and the
      // prediction for the latents' only (noise_pred[:, : latents.size(1)]).
      const at::Tensor input = edit_ ? at::cat({latents, reference_latents}, 1) : latents;
      const int64_t length = latents.size(1);
      at::Tensor pred = transformer(input, cond, timestep, caches.cond(), "cond").slice(1, 0, length);
      if (!cfg_rows.empty()) {
        const at::Tensor x = rows.defined() ? input.index_select(0, rows) : input;
        const at::Tensor t = rows.defined() ? timestep.index_select(0, rows) : timestep;
        const at::Tensor neg = transformer(x, uncond, t, caches.uncond(), "uncond").slice(1, 0, length);
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
    nn::count_graphs_into(graphs_.get(), statistics_);
    throw_if_cancelled();

    // latents / (1 / std) + mean, per channel, in the VAE's dtype, as diffusers writes it
    at::Tensor z = unpack_latents(latents, h, w).to(dtype_);
    z = z / inverse_latents_std(z.options()) + latents_mean(z.options());
    vae_phase();  // --offload model: the VAE to the device to decode
    return to_rgb(vae_->decode(z));  // [B, 3, H, W] in [-1, 1]
  }

  /// What the Edit pipelines refuse of a batch, one line each.
  void check_edit_items(const std::vector<ImageRequest>& batch) const {
    for (const ImageRequest& r : batch) {
      if (!r.image)
        throw InputError("an item without an input image for a Qwen-Image-Edit model (" + info_.pipeline_class +
                         "), which edits one: give the item an `image`, or use a Qwen-Image model for text-to-image");
      if (!plus_ && !r.more_images.empty())
        throw InputError("several input images for a QwenImageEditPipeline model, which takes one; "
                         "Qwen-Image-Edit-2509 (QwenImageEditPlusPipeline) takes several");
      if (r.mask)
        throw InputError("a mask for a Qwen-Image-Edit model, which takes its image as a reference to edit; drop the "
                         "mask");
    }
  }

  /// The VAE config's latents_mean, [1, z_dim, 1, 1] in `options`: torch.tensor(list) (float32) .to(dtype).
  at::Tensor latents_mean(const at::TensorOptions& options) const {
    return at::tensor(vae_config_.latents_mean, at::kDouble).to(at::kFloat).to(options).view({1, -1, 1, 1});
  }
  /// The VAE config's latents_std, [1, z_dim, 1, 1] in `options` (the Edit pipeline divides by it).
  at::Tensor latents_std(const at::TensorOptions& options) const {
    return at::tensor(vae_config_.latents_std, at::kDouble).to(at::kFloat).to(options).view({1, -1, 1, 1});
  }
  /// 1.0 / latents_std, the reciprocal taken in `options`' dtype, as diffusers writes it.
  at::Tensor inverse_latents_std(const at::TensorOptions& options) const {
    return at::reciprocal(at::tensor(vae_config_.latents_std, at::kDouble).to(at::kFloat).to(options)).view({1, -1, 1, 1});
  }

  /// The batch's max_sequence_length setting (0 for the Edit pipeline, which has none), after the size check.
  int64_t batch_max_sequence_length(const std::vector<ImageRequest>& batch) const {
    check_image_size(batch.front().width, batch.front().height, info_.size_multiple, vae_config_.scale_factor());
    if (edit_) return 0;
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
    std::vector<size_t> cond_rows(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) cond_rows[i] = i;
    std::vector<size_t> negative_rows;
    for (int64_t i : true_cfg_rows(batch)) negative_rows.push_back(static_cast<size_t>(i));
    TextConditioning cond = encode(batch, cond_rows, max_sequence_length, /*negative=*/false);
    if (negative_rows.empty()) return {cond, TextConditioning{}};
    return {cond, encode(batch, negative_rows, max_sequence_length, /*negative=*/true)};
  }

  /// _get_qwen_prompt_embeds + encode_prompt for the prompts (or negative prompts) of `rows` of `batch`, each
  /// encoded alone (its states do not depend on the batch's padding) through the cache; with the Edit pipeline,
  /// each with its item's image.
  TextConditioning encode(const std::vector<ImageRequest>& batch, const std::vector<size_t>& rows,
                          int64_t max_sequence_length, bool negative) {
    // The side is in the key only so that a truncation warning names the right one; the text
    // encoder takes no LoRA.
    const std::string side = negative ? "negative" : "prompt";
    std::vector<at::Tensor> states;  // each text's [L, D]
    for (size_t row : rows) {
      const ImageRequest& r = batch[row];
      const std::string& text = negative ? r.negative_prompt : r.prompt;
      const std::string key = edit_ ? side + " images" + image_key(references_of(r))
                                    : side + " max_sequence_length=" + std::to_string(max_sequence_length);
      std::vector<std::vector<at::Tensor>> e = embeddings_.each({text}, key, [&](const std::string& t) {
        encoder_phase();
        return std::vector<at::Tensor>{edit_ ? encode_one_with_images(t, references_of(r))
                                             : encode_one(t, max_sequence_length, negative)};
      });
      states.push_back(e[0][0]);
    }
    return conditioning(states, at::TensorOptions().dtype(dtype_).device(device_));
  }

  /// The Edit pipelines' prompt embedding [L, D] of one text with its item's images: each image through the
  /// processor and the vision tower, its tokens in place of its <|image_pad|> (the processor's expansion:
  /// grid_t * grid_h * grid_w / merge_size^2 of them), hidden_states[-1] less the first 64 tokens.
  /// QwenImageEditPipeline puts its one image's vision tokens first in the user turn; QwenImageEditPlusPipeline writes
  /// "Picture N: " before each image's, and gives the processor each image resized to
  /// calculate_dimensions(384 * 384, its ratio) from its own size. Nothing is cut: diffusers 0.36 neither truncates
  /// the processor's tokens nor the states.
  at::Tensor encode_one_with_images(const std::string& text, const std::vector<const RgbImage*>& images) {
    const Qwen2VLImageProcessor processor(image_processor_);
    std::string before = kEditTemplateBefore;
    std::vector<at::Tensor> pixel_values;
    std::vector<GridThw> grids;
    for (size_t i = 0; i < images.size(); ++i) {
      const RgbImage* image = images[i];
      RgbImage condition;
      if (plus_) {
        condition = resized(*image, edit_dimensions(image->width, image->height, kEditPlusConditionArea));
        image = &condition;
        before += "Picture " + std::to_string(i + 1) + ": ";
      }
      before += kVisionTokens;
      const Qwen2VLImageInput vision =
          processor.preprocess(io::RgbImageData{image->width, image->height, image->pixels});
      pixel_values.push_back(vision.pixel_values);
      grids.push_back(vision.grid_thw);
    }
    const Encoding e = tokenizer_->encode_unpadded(before + text + kTemplateAfter, std::numeric_limits<int>::max());
    const int64_t image_token = text_encoder_->config().image_token_id;
    const int64_t merge = image_processor_.merge_size;
    std::vector<int64_t> ids;
    size_t pads = 0;
    for (int64_t id : e.ids) {
      if (id != image_token) {
        ids.push_back(id);
      } else if (pads++ < grids.size()) {
        const GridThw& g = grids[pads - 1];
        ids.insert(ids.end(), static_cast<size_t>(g[0] * g[1] * g[2] / (merge * merge)), image_token);
      }
    }
    if (pads != grids.size())
      throw InputError("the Qwen-Image-Edit prompt \"" + text.substr(0, 60) + "\" holds " +
                       std::to_string(pads - grids.size()) + " <|image_pad|> token(s) of its own; the pipeline gives "
                       "each image one place, so drop them");
    const at::Tensor input_ids = at::tensor(ids, at::kLong).view({1, -1}).to(device_);
    // The processor's pixel_values of all images, in order, through the tower in one call (get_image_features).
    const at::Tensor image_embeds = visual_->forward(at::cat(pixel_values).to(device_), grids);
    const at::Tensor hidden = text_encoder_->hidden_state_with_images(input_ids, at::Tensor(), image_embeds, grids, -1)[0];
    if (hidden.size(0) <= kEditTemplateDrop)
      throw Error("the templated prompt has " + std::to_string(hidden.size(0)) +
                  " tokens, no more than the 64 the Qwen-Image-Edit pipelines drop; the tokenizer does not fit this model");
    return hidden.narrow(0, kEditTemplateDrop, hidden.size(0) - kEditTemplateDrop).to(dtype_);
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
  std::unique_ptr<nn::DenoiserGraphs> graphs_;  ///< --cuda-graphs, else null
  std::shared_ptr<AutoencoderKLQwenImageImpl> vae_;
  bool edit_ = false;  ///< model_index.json names QwenImageEditPipeline or QwenImageEditPlusPipeline
  bool plus_ = false;  ///< QwenImageEditPlusPipeline (Qwen-Image-Edit-2509): several references, each resized here
  Qwen2VLImageProcessorConfig image_processor_;       ///< Edit: the processor's preprocessor_config.json
  std::shared_ptr<Qwen2_5_VLVisionModelImpl> visual_;  ///< Edit: the text encoder's vision tower
  PipelineInfo info_;
  bool warned_no_negative_ = false;
  json statistics_ = json::object();  ///< statistics(): the step caches' counts over the run, and the graphs'
};

}  // namespace

ReferenceFacts qwen_image_reference_facts(const std::string& pipeline_class, const nlohmann::json&, int64_t) {
  const bool plus = pipeline_class == "QwenImageEditPlusPipeline";
  if (!plus && pipeline_class != "QwenImageEditPipeline") return {};
  // The input image is the reference the model edits: no strength, no mask (QwenImageEditInpaintPipeline is another
  // pipeline). An item's unset size is the reference's (`height = height or calculated_height`); __call__ reads
  // image.size first, so diffusers cannot run without one either; encode_prompt(image=...) writes the vision
  // tower's tokens into the prompt. Edit Plus (Qwen-Image-Edit-2509): several references, each its own "Picture N"
  // in the prompt and its own latents in the sequence; the last one sizes an item (image[-1].size).
  ReferenceFacts facts;
  facts.references = true;
  facts.max_pixels = kQwenImageEditReferenceMaxPixels;
  facts.sets_item_size = true;
  facts.sized_by_last = plus;
  facts.several = plus;
  facts.required = true;
  facts.prompt_reads = true;
  return facts;
}

std::vector<Component> qwen_image_derived_components(const ModelDir& model) {
  const std::string pipeline_class = model.model_index.value("_class_name", std::string());
  // The vision tower is what reads an Edit class's images into its prompt.
  if (!qwen_image_reference_facts(pipeline_class, nlohmann::json::object(), 0).prompt_reads) return {};
  const Component* text_encoder = model.find("text_encoder");
  if (!text_encoder || !text_encoder->single_file.empty()) return {};
  Component vision = *text_encoder;
  vision.name = "text_encoder.visual";
  vision.class_name = kQwen2_5_VLVisionClass;
  return {vision};
}

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

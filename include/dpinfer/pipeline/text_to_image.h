#pragma once
// What the worker asks of a pipeline. Deliberately free of LibTorch types and of
// ranks: the worker knows items and files, the pipeline knows models.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/settings.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

/// 8-bit RGB, row-major, height × width × 3.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
  bool finite = true;  ///< false when the decoded image had NaN/Inf (it is then garbage)
};

/// 8-bit grayscale, row-major, height × width: an inpainting mask as PIL's convert("L") gives it.
struct GrayImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

/// One image to make.
struct ImageRequest {
  std::string prompt;
  std::string negative_prompt;
  uint64_t seed = 0;  ///< seeds this image's own CPU generator (torch's mt19937)
  int steps = 0;
  double guidance_scale = 0;
  int width = 0;
  int height = 0;
  /// The family's settings for this image (PipelineInfo::settings), complete: every
  /// setting with its value (resolve_settings()). Empty: the family's defaults.
  nlohmann::json settings = nlohmann::json::object();
  /// The LoRAs merged into the model for this image (absolute paths), in merge order; the
  /// same for every request of a batch.
  io::LoraSet loras;
  /// img2img (issue 29): the input image, already width x height (the worker resizes it as
  /// diffusers' VaeImageProcessor does), or null for text-to-image; every request of a batch has
  /// one or none, with the same `strength` in (0, 1]: the share of the schedule run from it.
  std::shared_ptr<const RgbImage> image;
  /// A pipeline with PipelineInfo::several_references: the item's second and later references, in order, each
  /// sized as `image` is (reference_size()); empty otherwise. `image` is the first.
  std::vector<std::shared_ptr<const RgbImage>> more_images;
  double strength = 0;
  /// Inpainting (with `image`): the mask at width x height, resized as diffusers' mask processor
  /// resizes it; null for img2img. Every request of a batch has one or none.
  std::shared_ptr<const GrayImage> mask;
};

/// Facts recorded in every image's metadata and in run.json.
struct PipelineInfo {
  std::string family;          ///< the family table's name, e.g. "stable-diffusion-xl"
  std::string family_label;    ///< for people and messages, e.g. "Stable Diffusion XL"
  std::string pipeline_class;  ///< model_index.json's _class_name
  std::string model_name;      ///< e.g. the model directory's name or hub id
  std::string model_path;
  std::string model_revision;  ///< the hub cache snapshot's commit, or empty
  /// For a single-file checkpoint (then model_path is the file): {"kind", "label", "variant",
  /// "base", "components": {name: where it comes from}}; null for a pipeline directory.
  nlohmann::json single_file;
  std::string scheduler_name;  ///< dpinfer's name, e.g. "pndm"
  std::string sampler_label;   ///< AUTOMATIC1111's name, e.g. "PNDM", "DPM++ 2M Karras"
  /// The scheduler config keys the run set (--scheduler-set): part of what an image is.
  nlohmann::json scheduler_settings = nlohmann::json::object();
  std::string device;          ///< "cpu", "cuda:1"
  std::string dtype;           ///< "fp32", "fp16", "bf16"
  /// --weight-storage when it changes pixels ("fp8", "fp8-denoiser"), else empty: recorded with
  /// every image and part of what resume compares.
  std::string weight_storage;
  /// Whether the VAE decodes in tiles (--vae-tiling): part of what an image is, as the blend
  /// changes pixels.
  bool vae_tiling = false;
  /// --attention-backend when not "auto", else empty; --channels-last. Both choose other kernels,
  /// which round differently: recorded with every image and compared by resume.
  std::string attention_backend;
  bool channels_last = false;
  /// --fp8-compute when not "off" ("tensorwise", "rowwise"), else empty: other pixels, so recorded with
  /// every image and compared by resume.
  std::string fp8_compute;
  /// --cuda-graphs: the denoiser's calls replayed from CUDA graphs (the same values; run.json only).
  bool cuda_graphs = false;
  /// The family's settings, in order, and their values for this run (the load's settings
  /// over the defaults): what an item that sets none gets.
  std::vector<SettingSpec> setting_specs;
  nlohmann::json settings = nlohmann::json::object();
  int default_width = 512;
  int default_height = 512;
  int default_steps = 50;
  double default_guidance_scale = 7.5;
  /// Widths and heights must be multiples of this (8 for the UNet families; for Z-Image the
  /// model's vae_scale_factor * 2, 16 for the real VAE).
  int size_multiple = 8;
  /// The img2img strength of an item that sets none: the family's diffusers img2img pipeline's
  /// default (0.8 for SD, 0.3 for SDXL, 0.6 for the flow-matching families). 0: this pipeline
  /// takes no input image, and the worker refuses items that give one.
  double default_strength = 0;
  /// The strength of an inpainting item (with a mask) that sets none, as the family's diffusers
  /// inpainting pipeline defaults it; 0: this pipeline takes no mask.
  double default_inpaint_strength = 0;
  /// An inpainting checkpoint (a 9-channel UNet): every item needs an image and a mask.
  bool requires_mask = false;
  /// An edit model that cannot run without its reference (Qwen-Image-Edit): every item needs an image.
  bool requires_image = false;
  /// The input image is a reference the model edits (FLUX.1 Kontext, FLUX.2 [klein]), not the start of
  /// img2img: an item takes no strength and no mask, and the worker sizes its image as
  /// TextToImage::reference_size() says for the image's own size, not to the item's size.
  bool image_is_reference = false;
  /// With image_is_reference: an item may give several references (FLUX.2: `image` as a list), which the model
  /// reads in order, each with its own position ids. FLUX.1 Kontext takes one.
  bool several_references = false;
  /// With image_is_reference: an item with a reference and no width or height (neither its line's nor the run's)
  /// takes that side from its first reference as reference_size() sizes it, as FLUX.2's __call__ does
  /// (`height = height or image_height`). FLUX.1 Kontext's output keeps the default size.
  bool size_from_reference = false;
  /// With size_from_reference: the item's last reference sizes it, not its first (QwenImageEditPlusPipeline's
  /// `image[-1].size`).
  bool size_from_last_reference = false;
  /// The prompt's encoding reads the item's images (Qwen-Image-Edit: its vision tower writes them into the prompt),
  /// so TextToImage::prepare() needs them; otherwise only denoising does (an img2img start, FLUX.1 Kontext's and
  /// FLUX.2's references), and the worker decodes them then.
  bool prompt_reads_image = false;
  /// Components model_index.json names that this family does not run, e.g.
  /// "safety_checker (StableDiffusionSafetyChecker)".
  std::vector<std::string> ignored_components;
  /// The files whose SHA-256 is the infotext's `Model hash` (worker/model_hashes.h): the
  /// checkpoint of a single-file model, else the denoiser's weight files in name order.
  /// Empty: no hash.
  std::vector<std::string> hash_files;
};

/// Thrown by TextToImage::generate() when its cancel check said so: the batch is
/// abandoned between two denoising steps, and no image of it exists.
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("the batch was cancelled") {}
};

/// How an input image becomes a reference (PipelineInfo::image_is_reference): resized with Pillow's Lanczos to
/// `resized` (the same size: unchanged), then cut to `size` around its centre, as Pillow's
/// Image.crop(((W - w) // 2, (H - h) // 2, ...)) cuts it (Flux2ImageProcessor._resize_and_crop). FLUX.1
/// Kontext only resizes: `size` is `resized`. Each is {width, height}, and `size` fits in `resized`.
struct ReferenceSize {
  std::array<int, 2> resized;
  std::array<int, 2> size;
  /// With PipelineInfo::size_from_reference: the size of an item this reference sizes, when it is not `size`
  /// (Qwen-Image-Edit-2509 takes each reference at its own size and resizes it twice itself, while an item's unset
  /// size is the reference's at about 1024^2 pixels).
  std::optional<std::array<int, 2>> item_size = std::nullopt;
};

class TextToImage {
 public:
  using CancelCheck = std::function<bool()>;

  virtual ~TextToImage() = default;
  /// Asked between denoising steps (a fraction of a second each); once it returns
  /// true, generate() stops and throws Cancelled. This bounds how long a stop takes
  /// whatever the batch size and step count (SLURM kills after KillWait, 30 s).
  void set_cancel_check(CancelCheck check) { cancel_check_ = std::move(check); }
  virtual const PipelineInfo& info() const = 0;
  /// Throws InputError for complete `settings` (resolve_settings() against info()'s specs)
  /// that this model cannot take beyond their specs' types and ranges, e.g. a clip_skip
  /// past its text encoder's layers. The worker asks before it makes any item.
  virtual void check_settings(const nlohmann::json& settings) const { (void)settings; }
  /// With PipelineInfo::image_is_reference: how an input image of `width` x `height` becomes the reference of
  /// an item with `settings` (complete). Else the item's own size is used and this is not asked. Throws
  /// InputError for an image the pipeline refuses (too small, too narrow).
  virtual ReferenceSize reference_size(int width, int height, const nlohmann::json& settings) const {
    (void)settings;
    return {{width, height}, {width, height}};
  }
  /// Reads and checks each LoRA of `loras` against this model, keeping what it read for
  /// generate(). Throws InputError, one line naming the file, for a LoRA this model cannot
  /// take: none of its keys match, only some do, or its shapes do not fit. The worker asks
  /// for every distinct set before it makes any item. A family without LoRA support
  /// refuses any.
  virtual void check_loras(const io::LoraSet& loras) {
    if (!loras.empty())
      throw InputError(loras.front().path + ": " + info().family_label +
                       " models take no LoRA in dpinfer yet; drop --lora");
  }
  /// Makes one image per request, as one batch. All requests share steps,
  /// guidance_scale, width, height and settings. Each image depends only on its own request
  /// (its seed included), never on the rest of the batch, up to float rounding.
  /// Throws dpinfer::Error (or c10::Error) on failure.
  virtual std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) = 0;
  /// What this pipeline counted over its generate() calls, for the run's summary: with a step cache,
  /// {"denoiser_calls": per image and cache context, "denoiser_calls_cached": those that reused cached work
  /// (First Block Cache and DBCache: skipped the cached blocks; DeepCache: ran only the shallow branch),
  /// "step_cache": the cache's name, "step_cache_skip": what a cached call skipped, in words}. Integers are
  /// summed over the ranks. Empty when it counts nothing.
  virtual nlohmann::json statistics() const { return nlohmann::json::object(); }
  /// Two-phase chunks (issue 26; LoadRequest::two_phase): encodes the prompts and negative prompts
  /// of `chunk`, batches as generate() will get them, into the pipeline's cache of encodings, then
  /// releases the text encoders and brings the denoiser back; generate() on those batches then runs
  /// no encoder (on a miss it encodes, the encoders brought back). The images are those generate()
  /// makes alone. A batch that generate() would refuse is left to it. Throws Cancelled when the
  /// cancel check says so between two batches.
  virtual void prepare(const std::vector<std::vector<ImageRequest>>& chunk) { (void)chunk; }
  /// The modules on the device now, by model_index.json name ("text_encoder", "unet"), of those
  /// two-phase chunks release; empty for a pipeline that releases none.
  virtual std::vector<std::string> resident_components() const { return {}; }
  /// The modules on the device now, by model_index.json name, the VAE's included: all of them
  /// without --offload (LoadRequest::offload) and two-phase chunks; empty for a pipeline that
  /// keeps no account of them.
  virtual std::vector<std::string> components_on_device() const { return {}; }
  /// --offload's accounting so far: {"moves_to_device", "bytes_to_device"} for model offload, and for
  /// block offload {"block_groups", "blocks_per_group", "max_resident_groups", "group_copies",
  /// "offloaded_bytes", "largest_group_bytes"}. Empty without offload.
  virtual nlohmann::json offload_statistics() const { return nlohmann::json::object(); }

  /// --max-device-memory's plan (load.h LoadRequest::memory), set by load_text_to_image():
  /// {"summary": one log line, "choice": the levers and the estimate, "next": what to try after running out of memory, "record": run.json's
  /// "memory_plan"}; null without a plan.
  const nlohmann::json& memory_plan() const { return memory_plan_; }
  void set_memory_plan(nlohmann::json plan) { memory_plan_ = std::move(plan); }

  /// Something that must live as long as the pipeline and end with it: load_text_to_image()'s
  /// --attention-backend scope (nn/sdpa_backend.h SdpaBackendScope), kept here without its type.
  void keep_with_pipeline(std::shared_ptr<void> scope) { kept_.push_back(std::move(scope)); }

 protected:
  void throw_if_cancelled() const {
    if (cancel_check_ && cancel_check_()) throw Cancelled();
  }

 private:
  CancelCheck cancel_check_;
  nlohmann::json memory_plan_;
  std::vector<std::shared_ptr<void>> kept_;
};

}  // namespace dpinfer::pipeline

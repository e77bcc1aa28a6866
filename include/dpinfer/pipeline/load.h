#pragma once
// Loading a text-to-image pipeline, whatever its family: the one entry point the worker,
// inspect and the benchmark use. Free of LibTorch types: the worker's side of the seam.

#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

/// --max-device-memory (issue 26 item 6; memory_plan.h): the budget and the run's shape.
struct MemoryRequest {
  double budget = 0;  ///< bytes; 0: "auto", the device's free memory now less a margin
  bool exact = false; ///< --exact: never choose what changes pixels
  /// The largest item's size; 0: the model's default size.
  int64_t width = 0, height = 0;
  int64_t batch_size = 1;
  bool guidance = true;      ///< classifier-free guidance (a negative side per item)
  int encode_chunk = 64;     ///< the chunk two-phase encodes ahead, when the plan turns two-phase on
  /// The most input images an item has (0: none): where the model takes them as references (FLUX.1 Kontext,
  /// FLUX.2), their tokens join the denoiser's sequence, and the plan counts reference_pixels_bound()'s for each
  /// (memory_plan.h).
  int64_t reference_images = 0;
  /// Some item with an input image sets no width or height, so a model that takes an item's size from its reference
  /// (FLUX.2) may make an image as large as reference_pixels_bound() (memory_plan.h).
  bool sizes_from_references = false;
  /// The run's LoRA sets (--lora's and each line's, resolved to files): the plan counts the largest
  /// (lora_footprint(), memory_plan.h).
  std::vector<io::LoraSet> lora_sets;
};

/// What a caller asks for when it loads a pipeline.
struct LoadRequest {
  std::string model;          ///< directory with model_index.json, or a hub id (org/name[@revision])
  std::string variant;        ///< e.g. "fp16"; components without it fall back to the plain weights
  std::string scheduler;      ///< dpinfer name; empty: the one in scheduler_config.json
  std::string dtype = "fp32"; ///< fp32, fp16 or bf16
  std::string device = "cpu"; ///< "cpu" or "cuda:N"
  /// The family's settings for the run (resolve_settings()); an item's own settings go
  /// with its ImageRequest. Unknown keys are bad input.
  nlohmann::json settings = nlohmann::json::object();
  /// What completes a single-file `model` (model_dir.h SingleFileOptions): base, text encoders, VAE.
  std::string base;
  std::string text_encoder;
  std::string text_encoder_2;
  std::string vae;
  /// Keys of scheduler_config.json for this run (--scheduler-set; scheduler_settings.h).
  nlohmann::json scheduler_settings = nlohmann::json::object();
  /// How the weights are kept (--weight-storage): "default" (in `dtype`), "fp8" (the denoiser's and
  /// the text encoders' Linear and Conv2d weights in float8_e4m3fn between uses, as diffusers'
  /// enable_layerwise_casting keeps them) or "fp8-denoiser" (the denoiser's only).
  std::string weight_storage = "default";
  /// --vae-tiling: the VAE decodes (and encodes) large images in overlapping, blended tiles, as
  /// diffusers' vae.enable_tiling(): less memory, slightly other pixels.
  bool vae_tiling = false;
  /// --attention-backend (nn/sdpa_backend.h): "auto" (LibTorch picks per call), "flash", "efficient",
  /// "cudnn" or "math": every scaled_dot_product_attention of the process restricted to that kernel
  /// while the pipeline lives, as torch.nn.attention.sdpa_kernel(backend). Other kernels round
  /// differently: recorded, and part of what resume compares.
  std::string attention_backend = "auto";
  /// --channels-last: the denoiser's and the VAE's 4-D weights (their Conv2d kernels) in channels-last
  /// memory format, as pipe.unet.to(memory_format=torch.channels_last) and the same for pipe.vae; the
  /// convolutions then give channels-last activations. Other kernels: recorded, part of resume's identity.
  bool channels_last = false;
  /// --fp8-compute: "off"; "tensorwise" or "rowwise", the Linear layers of the denoiser's blocks (a DiT's
  /// block lists) multiplying in float8_e4m3fn with torch._scaled_mm, as torchao 0.15's
  /// Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor() or PerRow()) computes them
  /// (nn::LinearImpl::compute_in_fp8). Other pixels: recorded, part of resume's identity.
  std::string fp8_compute = "off";
  /// --cuda-graphs: the denoiser's calls captured once per key and replayed (nn/cuda_graphs.h). The same kernels
  /// and values, so not part of an image's identity. FLUX.1 models on CUDA only; not with --offload.
  bool cuda_graphs = false;
  /// Two-phase chunks (TextToImage::prepare, --encode-chunk): the text encoders and the denoiser
  /// are never on the device together, and the encodings of a chunk wait in host memory.
  bool two_phase = false;
  /// --offload (issue 26 item 4): "none"; "model", each component (text encoders, denoiser, VAE) in
  /// host memory and on the device only while it runs, as diffusers' enable_model_cpu_offload; or
  /// "blocks", the denoiser's transformer blocks in host memory in groups of offload_blocks_per_group,
  /// each group brought to the device (the next one prefetched) while it runs, as diffusers'
  /// apply_group_offloading(offload_type="block_level", use_stream=True). The pixels are the same.
  std::string offload = "none";
  int offload_blocks_per_group = 1;
  /// --max-device-memory: plan the memory first (memory_plan.h). The load then uses the levers the plan
  /// chose where this request left them at their defaults, caps the device at the budget, and the
  /// pipeline's memory_plan() says what was chosen. Throws OutOfMemory (exit 4) when nothing fits.
  std::optional<MemoryRequest> memory;
};

/// Resolves the model, picks its family by model_index.json's _class_name, and loads it (with
/// request.memory, after planning its memory):
/// every module is built uninitialised in the run dtype on the target device, after its
/// weight files' keys and shapes were checked against it, and each tensor is copied once
/// from its file. Throws InputError for a model that cannot be used (with the message
/// `dpinfer inspect` prints), Error otherwise.
std::unique_ptr<TextToImage> load_text_to_image(const LoadRequest& request);

}  // namespace dpinfer::pipeline

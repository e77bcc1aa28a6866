#include "dpinfer/pipeline/load.h"

#include "dpinfer/pipeline/memory_plan.h"

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/fp8_compute.h"
#include "dpinfer/pipeline/loading/layerwise_storage.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/nn/cuda_graphs.h"
#include "dpinfer/pipeline/nn/sdpa_backend.h"
#include "dpinfer/pipeline/scheduler_settings.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

namespace {

/// load_text_to_image() with the request's levers as they are.
std::unique_ptr<TextToImage> load_as_requested(const LoadRequest& request) {
  try {
    const SingleFileOptions single_file{request.base, request.text_encoder, request.text_encoder_2, request.vae};
    ModelDir model = resolve_model(request.model, request.variant, nullptr, single_file);
    apply_scheduler_settings(model, request.scheduler, request.scheduler_settings);
    if (model.single_file && !model.single_file->weight_storage.empty() &&
        parse_weight_storage(request.weight_storage) != c10::ScalarType::Undefined)
      throw InputError("--weight-storage " + request.weight_storage + ": " + quote(model.single_file->path) +
                       " is a GGUF file, whose transformer keeps its own quantized storage; drop --weight-storage");
    if (!request.variant.empty())
      for (const Component& c : model.components)
        if (has_weights(c.role) && c.variant.empty())
          log::warn("{} has no '{}' variant; loading its plain weights", c.name, request.variant);
    // A --set key this family lacks but others have (first_block_cache: FLUX.1 and Qwen-Image): say which,
    // before the family's own check refuses it without knowing the others.
    if (request.settings.is_object())
      for (const auto& [key, value] : request.settings.items()) {
        if (find_spec(model.family->settings, key)) continue;
        std::vector<std::string> others;
        for (const Family& f : families())
          if (find_spec(f.settings, key)) others.push_back(f.label);
        if (others.empty()) continue;  // the family's check says it is no setting at all
        const std::string last = others.back();
        others.pop_back();
        throw InputError("--set: " + quote(key, 60) + " is not a setting of " + model.family->label + " models, only of " +
                         (others.empty() ? last : join(others) + " and " + last) +
                         " models; drop it for this model (`dpinfer inspect MODEL` lists its settings)");
      }
    // --weight-storage: the denoiser's layers, and with "fp8" the text encoders' too (never the VAE's).
    if (parse_weight_storage(request.weight_storage) != c10::ScalarType::Undefined)
      for (Component& c : model.components)
        if (c.role == ComponentRole::kDenoiser ||
            (c.role == ComponentRole::kTextEncoder && request.weight_storage == "fp8"))
          c.weight_storage = "fp8";
    // --fp8-compute: the denoiser's blocks (refused here where the device cannot run it, and beside another
    // quantization of the same weights).
    check_fp8_compute(request.fp8_compute, request.device, request.dtype);
    if (request.fp8_compute != "off") {
      if (parse_weight_storage(request.weight_storage) != c10::ScalarType::Undefined)
        throw InputError("--fp8-compute " + request.fp8_compute + " with --weight-storage " + request.weight_storage +
                         ": both keep the denoiser's weights in float8, each its own way; drop one (--fp8-compute "
                         "keeps the blocks' weights in float8 already)");
      if (model.single_file && !model.single_file->weight_storage.empty())
        throw InputError("--fp8-compute " + request.fp8_compute + ": " + quote(model.single_file->path) +
                         " is a GGUF file, whose transformer keeps its own quantized storage; drop --fp8-compute");
      for (Component& c : model.components)
        if (c.role == ComponentRole::kDenoiser) c.fp8_compute = request.fp8_compute;
    }
    // --cuda-graphs: the denoiser calls of a family whose row has cuda_graphs (family_specs.cpp), on CUDA, with its
    // weights where they stay. The family first, so that a model that has none says so on any device.
    if (request.cuda_graphs) {
      if (!model.family->cuda_graphs)
        throw InputError("--cuda-graphs: captured for " +
                         family_labels([](const FamilySpec& f) { return f.cuda_graphs; }) + " models, and this is a " +
                         model.family->label + " model; drop --cuda-graphs");
      nn::check_cuda_graphs(request.device);
      if (request.offload != "none")
        throw InputError("--cuda-graphs with --offload " + request.offload + ": a graph replays its kernels on the "
                         "weights' addresses at capture, and offload moves the weights for every call; drop one");
    }
    // --attention-backend: refused here, before any weight is read, when the device cannot run it.
    const nn::SdpaBackend attention = nn::parse_sdpa_backend(request.attention_backend);
    nn::check_sdpa_backend(attention, request.device, parse_dtype(request.dtype));
    std::unique_ptr<TextToImage> pipe = model.family->load(model, request, *model.family);
    if (attention != nn::SdpaBackend::kAuto) pipe->keep_with_pipeline(std::make_shared<nn::SdpaBackendScope>(attention));
    return pipe;
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());  // a model that cannot be used is bad input (exit 2)
  }
}

}  // namespace

std::unique_ptr<TextToImage> load_text_to_image(const LoadRequest& request) {
  if (!request.memory) return load_as_requested(request);
  LoadRequest planned = request;
  const MemoryPlanChoice choice = plan_memory(planned, *request.memory);
  std::unique_ptr<TextToImage> pipe = load_as_requested(planned);
  pipe->set_memory_plan({{"summary", choice.summary}, {"choice", choice.choice}, {"next", choice.next}, {"record", choice.record}});
  return pipe;
}

}  // namespace dpinfer::pipeline

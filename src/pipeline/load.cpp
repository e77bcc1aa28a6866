#include "dpinfer/pipeline/load.h"

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/loading/layerwise_storage.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/scheduler_settings.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

std::unique_ptr<TextToImage> load_text_to_image(const LoadRequest& request) {
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
    // --weight-storage: the denoiser's layers, and with "fp8" the text encoders' too (never the VAE's).
    if (parse_weight_storage(request.weight_storage) != c10::ScalarType::Undefined)
      for (Component& c : model.components)
        if (c.role == ComponentRole::kDenoiser ||
            (c.role == ComponentRole::kTextEncoder && request.weight_storage == "fp8"))
          c.weight_storage = "fp8";
    return model.family->load(model, request, *model.family);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());  // a model that cannot be used is bad input (exit 2)
  }
}

}  // namespace dpinfer::pipeline

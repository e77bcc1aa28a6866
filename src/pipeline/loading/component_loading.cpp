#include "dpinfer/pipeline/loading/component_loading.h"

#include "dpinfer/pipeline/device_memory.h"

#include <torch/nn/module.h>

#include <algorithm>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/pipeline/conversion/flux2_bfl_keys.h"
#include "dpinfer/pipeline/conversion/flux_bfl_keys.h"
#include "dpinfer/pipeline/conversion/sd3_keys.h"
#include "dpinfer/pipeline/conversion/z_image_keys.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/fp8_compute.h"
#include "dpinfer/pipeline/loading/gguf_storage.h"
#include "dpinfer/pipeline/loading/layerwise_storage.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_config.h"
#include "dpinfer/pipeline/models/transformers/chroma_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/z_image_transformer_config.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// SD3's CLIP-L read from a Stability file: diffusers 0.36.0's create_diffusers_clip_model_from_ldm
/// (is_clip_sd3_model) sets its text_projection to torch.eye(hidden), whatever the file holds, so the
/// file gives no part for it (ldm_keys.cpp) and load_component fills it.
bool gets_identity_projection(const Component& c) {
  return !c.single_file.empty() && c.layout == CheckpointLayout::kSd3ClipL;
}

}  // namespace

at::ScalarType parse_dtype(const std::string& d) {
  if (d == "fp32") return at::kFloat;
  if (d == "fp16") return at::kHalf;
  if (d == "bf16") return at::kBFloat16;
  throw InputError("dtype: expected fp32, fp16 or bf16, got '" + d + "'");
}

namespace {

const ModelClass& model_class_of(const Component& c) {
  const ModelClass* model_class = find_model_class(c.class_name);
  if (!model_class) throw Error("component '" + c.name + "': dpinfer cannot build a " + c.class_name);
  return *model_class;
}

std::vector<std::string> weight_files_of(const Component& c) {
  return c.single_file.empty() ? find_weight_files(c.path, c.variant).files : std::vector<std::string>{c.single_file};
}

/// check_component() on what the caller has already found: the class, the files, their renames and converter.
std::shared_ptr<torch::nn::Module> check_keys(const Component& c, const ModelClass& model_class,
                                              const std::vector<std::string>& files, const KeyRenames& renames,
                                              const KeyConverter& convert, const at::TensorOptions& options) {
  // Names and shapes only: the strict key check runs before a byte is allocated.
  std::shared_ptr<torch::nn::Module> shape = model_class.build(c.config, options.device(at::kMeta));
  const KeyReport report = match_keys(*shape, files, renames, c.name, convert);
  if (!report.ok()) throw Error(key_mismatch_message(report, files, c.name));
  return shape;
}

}  // namespace

bool component_stores_weights(const Component& c) {
  return parse_weight_storage(c.weight_storage) != at::ScalarType::Undefined || !c.fp8_compute.empty() ||
         (!c.single_file.empty() && io::GgufFile::has_magic(c.single_file));
}

std::shared_ptr<torch::nn::Module> check_component(const Component& c, const at::TensorOptions& options) {
  const ModelClass& model_class = model_class_of(c);
  return check_keys(c, model_class, weight_files_of(c), component_key_renames(c, model_class.renames),
                    c.single_file.empty() ? KeyConverter() : single_file_converter(c), options);
}

std::shared_ptr<torch::nn::Module> load_component(const Component& c, const at::TensorOptions& options,
                                                  const LoadOptions& load_options) {
  const ModelClass* model_class = &model_class_of(c);
  const std::vector<std::string> files = weight_files_of(c);
  LoadOptions load = load_options;
  if (!c.single_file.empty()) load.convert = single_file_converter(c);
  const KeyRenames renames = component_key_renames(c, model_class->renames);
  check_keys(c, *model_class, files, renames, load.convert, options);
  std::shared_ptr<torch::nn::Module> module;
  const at::ScalarType storage = parse_weight_storage(c.weight_storage);
  const bool gguf = !c.single_file.empty() && io::GgufFile::has_magic(c.single_file);
  if (storage == at::ScalarType::Undefined && !gguf) {
    module = model_class->build(c.config, options);
  } else {
    // Built on the host, where an uninitialised tensor costs no memory until it is written, then
    // each tensor allocated on the device in its own dtype: on a GPU the run-dtype weights of the
    // stored layers never exist, only their float8 ones or their GGUF blocks. The build's tensors are
    // never written, so --max-device-memory's count of the CPU's allocations leaves them out.
    const at::ScalarType compute = options.dtype().toScalarType();
    {
      DeviceMemory::Uncounted never_written;
      module = model_class->build(c.config, options.device(at::kCPU));
    }
    if (storage != at::ScalarType::Undefined) {
      const std::vector<std::string> stored = layerwise_stored_layers(*module, model_class->layerwise_casting_skip);
      const int64_t bytes = store_layers(*module, stored, storage, compute);
      load.stored_through = compute;
      log::debug("{}: {} of its layers stored in {} ({:.1f} MB)", c.name, stored.size(), c10::toString(storage),
                 static_cast<double>(bytes) / 1e6);
    }
    if (gguf) {
      // The Linear weights the file holds quantized keep its blocks (diffusers' GGUFLinear).
      const auto quantized = gguf_quantized_keys(*module, files, renames, c.name, load.convert);
      const int64_t bytes = store_gguf_layers(*module, quantized, compute);
      log::debug("{}: {} of its Linear weights kept as GGUF blocks ({:.1f} MB)", c.name, quantized.size(),
                 static_cast<double>(bytes) / 1e6);
    }
    for (at::Tensor t : module->parameters()) t.set_data(at::empty(t.sizes(), t.options().device(options.device())));
    for (at::Tensor t : module->buffers()) t.set_data(at::empty(t.sizes(), t.options().device(options.device())));
  }
  load_weights(*module, files, renames, c.name, load);
  if (!c.fp8_compute.empty()) {
    const std::vector<std::string> changed = compute_blocks_in_fp8(*module, c.name, c.fp8_compute);
    log::debug("{}: {} of its blocks' Linear layers compute in float8 ({})", c.name, changed.size(), c.fp8_compute);
  }
  if (gets_identity_projection(c)) {
    at::NoGradGuard no_grad;
    at::Tensor projection;  // a handle on the module's parameter
    for (const auto& p : module->named_parameters(/*recurse=*/true))
      if (p.key() == "text_projection.weight") projection = p.value();
    // torch.eye(hidden_size) loads only into a square projection (projection_dim = hidden_size, as
    // CLIP ViT-L's 768); diffusers' load refuses another.
    if (!projection.defined() || projection.dim() != 2 || projection.size(0) != projection.size(1))
      throw InputError("component '" + c.name + "': SD3's CLIP-L read from " + quote(c.single_file) +
                       " gets the identity as its text_projection (as diffusers gives it), which needs a "
                       "CLIPTextModelWithProjection config with projection_dim = hidden_size; the base's config in " +
                       quote(c.path) + " has another, give the base the file belongs to or --text-encoder DIR");
    projection.copy_(at::eye(projection.size(0), projection.options()));
  }
  module->eval();
  log::debug("{}: {} loaded from {} file(s) as {} on {}", c.name, c.class_name, files.size(),
             c10::toString(options.dtype().toScalarType()), options.device().str());
  return module;
}

KeyRenames component_key_renames(const Component& c, const KeyRenames& renames) {
  KeyRenames out = renames;
  if (gets_identity_projection(c)) out.ignored.push_back("text_projection.weight");
  return out;
}

KeyConverter single_file_converter(const Component& c) {
  if (c.layout == CheckpointLayout::kFluxBfl) {
    // single_blocks.N.linear1 splits at the attention's width (diffusers' inner_dim; Chroma's
    // converter hard-codes FLUX.1's 3072, the config gives any width).
    const int64_t inner_dim = c.class_name == "ChromaTransformer2DModel"
                                  ? ChromaTransformerConfig::from_json(c.config).inner_dim()
                                  : FluxTransformerConfig::from_json(c.config).inner_dim();
    return [prefix = c.key_prefix, inner = inner_dim](
               const std::vector<SourceTensor>& tensors) { return convert_flux_bfl_keys(prefix, inner, tensors); };
  }
  if (c.layout == CheckpointLayout::kZImageOriginal) {
    // all_x_embedder / all_final_layer are keyed "<patch_size>-<f_patch_size>"; the original
    // file has one of each, the config's first (Z-Image: "2-1", as diffusers' converter writes).
    const ZImageTransformerConfig z = ZImageTransformerConfig::from_json(c.config);
    const std::string patch = std::to_string(z.all_patch_size.at(0)) + "-" + std::to_string(z.all_f_patch_size.at(0));
    return [prefix = c.key_prefix, patch](const std::vector<SourceTensor>& tensors) {
      return convert_z_image_keys(prefix, patch, tensors);
    };
  }
  if (c.layout == CheckpointLayout::kSd3Mmdit)
    return [prefix = c.key_prefix](const std::vector<SourceTensor>& tensors) {
      return convert_sd3_keys(prefix, tensors);
    };
  if (c.layout == CheckpointLayout::kFlux2Bfl)
    return [prefix = c.key_prefix](const std::vector<SourceTensor>& tensors) {
      return convert_flux2_bfl_keys(prefix, tensors);
    };
  LayoutShape shape;
  switch (c.layout) {
    case CheckpointLayout::kLdmUNet: {
      // LDM's UNetModel has one num_res_blocks for every level.
      const UNetConfig unet = UNetConfig::from_json(c.config);
      const auto& lpb = unet.layers_per_block;
      if (lpb.empty() || std::any_of(lpb.begin(), lpb.end(), [&](int64_t n) { return n != lpb[0]; }))
        throw InputError("component '" + c.name + "': an LDM checkpoint needs one layers_per_block for every level; "
                         "the config in " + quote(c.path) + " has several");
      shape.unet_layers_per_block = lpb[0];
      break;
    }
    case CheckpointLayout::kLdmVae:
      shape.vae_levels = static_cast<int64_t>(AutoencoderKLConfig::from_json(c.config).block_out_channels.size());
      break;
    case CheckpointLayout::kTransformersClip:
    case CheckpointLayout::kSd3ClipL:
    case CheckpointLayout::kOpenClip:
      shape.text_layers = CLIPTextConfig::from_json(c.config).num_hidden_layers;
      shape.text_projection = c.class_name == "CLIPTextModelWithProjection";
      break;
    case CheckpointLayout::kFluxBfl:
    case CheckpointLayout::kZImageOriginal:
    case CheckpointLayout::kSd3Mmdit:
    case CheckpointLayout::kFlux2Bfl:
      break;  // above
    case CheckpointLayout::kDiffusersNames:
      break;  // the names as they are
  }
  return [layout = c.layout, prefix = c.key_prefix, shape](const std::vector<SourceTensor>& tensors) {
    return convert_ldm_keys(layout, prefix, shape, tensors);
  };
}

}  // namespace dpinfer::pipeline

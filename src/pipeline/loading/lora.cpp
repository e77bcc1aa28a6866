// Ref: peft 0.17 tuners/lora/layer.py (Linear.get_delta_weight, Conv2d.get_delta_weight, merge,
// LoraLayer.set_scale) as diffusers 0.36's fuse_lora drives it (loaders/lora_base.py
// _fuse_lora_apply). The delta is computed the way PEFT computes it, so the merged fp32
// weights are diffusers' bit for bit (tests/torch/test_lora.cpp).
#include "dpinfer/pipeline/loading/lora.h"

#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <optional>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/loading/lora_adapter_metadata.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// The PEFT config diffusers wrote into the file's header, if any (lora_adapter_metadata.h).
std::optional<LoraAdapterMetadata> adapter_metadata(const io::SafetensorsFile& file, const std::string& path) {
  const auto& metadata = file.metadata();
  auto it = metadata.find("lora_adapter_metadata");
  if (it == metadata.end() || it->second.empty()) return std::nullopt;  // diffusers: `if raw` else None
  return LoraAdapterMetadata::parse(it->second, path);
}

/// A LoRA tensor as a CPU tensor of its own dtype; only float types are LoRA factors.
at::Tensor read_tensor(const io::TensorView& view, const std::string& file) {
  at::ScalarType dtype;
  switch (view.dtype) {
    case io::Dtype::kF32: dtype = at::kFloat; break;
    case io::Dtype::kF16: dtype = at::kHalf; break;
    case io::Dtype::kBF16: dtype = at::kBFloat16; break;
    case io::Dtype::kF64: dtype = at::kDouble; break;
    default:
      throw InputError(quote(file) + ": tensor " + quote(view.name, 80) + " is " +
                       std::string(io::dtype_name(view.dtype)) + "; LoRA weights must be F32, F16, BF16 or F64");
  }
  at::Tensor t = at::empty(view.shape, at::TensorOptions().dtype(dtype));
  if (view.nbytes) std::memcpy(t.data_ptr(), view.data, view.nbytes);
  return t;
}

/// The module names whose weights a LoRA may change: Linear [out, in] and Conv2d
/// [out, in, kh, kw] weights, not the embedding tables (which PEFT treats apart).
bool is_lora_target(const std::string& module, const at::Tensor& weight) {
  if (weight.dim() != 2 && weight.dim() != 4) return false;
  // T5's token table ("shared") and relative_attention_bias are nn.Embedding too (Chroma's text_encoder).
  if (module == "shared" || ends_with(module, ".shared") || ends_with(module, "relative_attention_bias")) return false;
  return !ends_with(module, "embedding") && !ends_with(module, "embeddings") && !ends_with(module, "embed_tokens");
}

/// PEFT's get_delta_weight for one layer, in the weight's dtype (fp32 on the CPU for fp16 and
/// bf16 weights, then cast back, as PEFT does for slow CPU half matmuls).
at::Tensor delta_weight(const at::Tensor& down, const at::Tensor& up, const at::Tensor& weight, double scaling) {
  const bool cast = weight.device().is_cpu() && (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16);
  const at::Tensor a = cast ? down.to(at::kFloat) : down;  // A: [r, in] or [r, in, kh, kw]
  const at::Tensor b = cast ? up.to(at::kFloat) : up;      // B: [out, r] or [out, r, 1, 1]
  at::Tensor delta;
  if (weight.dim() == 2) {
    delta = at::matmul(b, a) * scaling;  // [out, in]
  } else if (weight.size(2) == 1 && weight.size(3) == 1) {
    // conv2d 1x1: [out, r] @ [r, in], back to [out, in, 1, 1]
    delta = at::matmul(b.squeeze(3).squeeze(2), a.squeeze(3).squeeze(2)).unsqueeze(2).unsqueeze(3) * scaling;
  } else {
    // conv2d(A^T [in, r, kh, kw], B [out, r, 1, 1]) is [in, out, kh, kw]; transposed: [out, in, kh, kw]
    delta = at::conv2d(a.transpose(0, 1), b).transpose(0, 1) * scaling;
  }
  return cast ? delta.to(weight.scalar_type()) : delta;
}

/// PEFT's DoRA merge of one layer (peft 0.17 tuners/lora/variants.py DoraLinearVariant.merge_unsafe and
/// _DoraConvNdVariant.merge_unsafe, with dora.py's get_weight_norm at scaling 1): from the weight W and the
/// layer's delta dW (delta_weight, in W's dtype), W' = m / ||W + dW|| * (W + dW), with the 2-norm of each output
/// row: over dim 1 of a Linear's [out, in], over dims 1-3 of a Conv2d's [out, in, kh, kw]. `magnitude` m is the
/// file's lora_magnitude_vector in W's dtype: [out], or [1, out, 1, 1] as the norm a Conv2d's takes (kept dims,
/// transposed). The norm is computed in W's dtype, as PEFT does (torch.linalg.norm and Tensor.norm both reach
/// linalg_vector_norm).
at::Tensor dora_merged(const at::Tensor& weight, const at::Tensor& delta, const at::Tensor& magnitude) {
  const at::Tensor sum = weight + delta;  // W + dW: [out, in] or [out, in, kh, kw]
  if (weight.dim() == 2) {
    const at::Tensor norm = at::linalg_vector_norm(sum, 2, {1}, /*keepdim=*/false).to(weight.scalar_type());  // [out]
    return ((magnitude / norm).view({-1, 1}) * sum).to(weight.scalar_type());
  }
  const at::Tensor norm = at::linalg_vector_norm(sum, 2, {1, 2, 3}, /*keepdim=*/true).transpose(1, 0);  // [1, out, 1, 1]
  return ((magnitude / norm).view({-1, 1, 1, 1}) * sum).to(weight.scalar_type());
}

/// Whether part `layer` of a fused LoRA layer (LoraLayer::up_rows) has zeros wherever its rows of the
/// up factor [rows of all parts, r] meet another part's columns (r / parts each): one test of
/// diffusers' _convert_to_ai_toolkit_cat's is_sparse, which holds when it holds for every part.
bool part_is_block_diagonal(const LoraLayer& layer, const at::Tensor& up) {
  const int64_t rank = up.size(1), parts = layer.parts;
  if (rank % parts != 0) return false;
  const int64_t block = rank / parts;
  const at::Tensor rows = up.slice(0, layer.up_rows->begin, layer.up_rows->end);
  for (int64_t k = 0; k < parts; ++k)
    if (k != layer.part && !rows.slice(1, k * block, (k + 1) * block).eq(0).all().item<bool>()) return false;
  return true;
}

/// Part `layer` of a fused LoRA layer from the whole (scaled) factors down [r, in] and up [rows, r], as
/// _convert_to_ai_toolkit_cat splits them: its rows of up and all of down; or, for a block-diagonal up
/// factor, its diagonal block of up and its rows of down, at rank r / parts (layer.rank is updated).
void take_part(LoraLayer& layer, at::Tensor& down, at::Tensor& up, bool block_diagonal) {
  const LoraRows rows = *layer.up_rows;
  if (!block_diagonal) {
    up = up.slice(0, rows.begin, rows.end).contiguous();
    return;
  }
  const int64_t block = down.size(0) / layer.parts;
  down = down.slice(0, layer.part * block, (layer.part + 1) * block).contiguous();
  up = up.slice(0, rows.begin, rows.end).slice(1, layer.part * block, (layer.part + 1) * block).contiguous();
  layer.rank = block;
}

/// PEFT's set_scale: scaling = scale * lora_alpha / r, left to right, in Python floats, or in float32 where
/// lora_alpha is a tensor (0-d float32 tensor arithmetic; then the float32 value, exactly).
double peft_scaling(const LoraLayerScaling& s, double scale) {
  if (s.alpha_is_tensor)
    return static_cast<double>(static_cast<float>(static_cast<float>(scale) * static_cast<float>(s.alpha)) /
                               static_cast<float>(s.layer.rank));
  return scale * s.alpha / static_cast<double>(s.layer.rank);
}

}  // namespace

void LoraMerger::add_component(const std::string& name, torch::nn::Module& module, bool unfused) {
  if (unfused) unfused_.insert(name);
  register_weights(name, module);
}

void LoraMerger::add_detached(const std::string& name, torch::nn::Module& shapes, const at::TensorOptions& options,
                              bool unfused) {
  if (unfused) unfused_.insert(name);
  register_weights(name, shapes, options);
  detached_.insert(name);
}

void LoraMerger::register_weights(const std::string& name, torch::nn::Module& module,
                                  const std::optional<at::TensorOptions>& options) {
  const bool unfused = unfused_.count(name) > 0;
  std::map<std::string, torch::nn::Module*> owners;  // an unfused component's modules by name
  if (unfused)
    for (const auto& item : module.named_modules("", /*include_self=*/false)) owners[item.key()] = item.value().get();
  // Tensor handles share the parameters' storage: in-place changes reach the module.
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& key = item.key();
    if (!ends_with(key, ".weight")) continue;
    const std::string module_name = key.substr(0, key.size() - 7);
    if (!is_lora_target(module_name, item.value())) continue;
    const std::string full = name + "/" + module_name;
    module_order_.emplace(full, module_order_.size());
    std::vector<int64_t> shape = item.value().sizes().vec();
    if (unfused) {
      // PEFT wraps nn.Linear and nn.Conv2d (dispatch_default); dpinfer's are nn::WeightedLayer.
      auto owner = owners.find(module_name);
      auto* layer = owner == owners.end() ? nullptr : dynamic_cast<nn::WeightedLayer*>(owner->second);
      if (!layer) {
        // Its C++ class without namespaces and LibTorch's "Impl" suffix, for the message.
        std::string kind = owner == owners.end() ? "parameter" : owner->second->name();
        if (const size_t colon = kind.rfind("::"); colon != std::string::npos) kind = kind.substr(colon + 2);
        if (ends_with(kind, "Impl")) kind.resize(kind.size() - 4);
        no_unfused_path_[full] = kind;
      } else if (!options) {
        layers_[full] = layer;
      }
      // A GGUF layer's weight is its blocks [out, row bytes]; the LoRA fits the logical [out, in] (diffusers'
      // _calculate_module_shape: a GGUFParameter's quant_shape).
      if (layer && layer->gguf_type())
        shape.back() = shape.back() / io::ggml_type_size(*layer->gguf_type()) * io::ggml_block_size(*layer->gguf_type());
    } else if (!options) {
      weights_[full] = item.value();
    }
    weight_options_[full] = options ? options->dtype(item.value().scalar_type()) : item.value().options();
    table_[name][module_name] = std::move(shape);
  }
}

void LoraMerger::detach(const std::string& name) {
  const std::string prefix = name + "/";
  for (auto* map : {&weights_, &originals_})
    for (auto it = map->lower_bound(prefix); it != map->end() && starts_with(it->first, prefix);) it = map->erase(it);
  for (auto it = layers_.lower_bound(prefix); it != layers_.end() && starts_with(it->first, prefix);) it = layers_.erase(it);
  for (auto it = attached_.lower_bound(prefix); it != attached_.end() && starts_with(*it, prefix);) it = attached_.erase(it);
  detached_.insert(name);
}

void LoraMerger::reattach(const std::string& name, torch::nn::Module& module) {
  detached_.erase(name);
  register_weights(name, module);
  // The weights are the files' again, and the set in place was merged into the rest.
  c10::InferenceMode guard;
  merge(current_, [&](const std::string& component) { return component == name; });
}

at::Tensor LoraMerger::weight(const std::string& component, const std::string& module) {
  auto it = weights_.find(component + "/" + module);
  if (it == weights_.end()) throw Error("LoRA: " + component + " has no weight " + module + ".weight");
  return it->second;
}

std::vector<LoraTensorKey> lora_tensor_keys(const io::SafetensorsFile& file) {
  std::vector<LoraTensorKey> keys;
  for (const io::TensorView& v : file.tensors()) keys.push_back({v.name, v.shape});
  return keys;
}

namespace {

/// The LoRA file at `path`, its header read (a system call's failure is bad input, naming the file).
std::shared_ptr<const io::SafetensorsFile> open_lora_file(const std::string& path) {
  try {
    return io::SafetensorsFile::open(path);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());  // the caller says where it was asked for
  }
}

/// Throws the InputError of a factor that is not a float tensor, from its header entry (read_tensor's check).
void check_factor_dtype(const io::TensorView& view, const std::string& file) {
  switch (view.dtype) {
    case io::Dtype::kF32: case io::Dtype::kF16: case io::Dtype::kBF16: case io::Dtype::kF64: return;
    default: read_tensor(view, file);  // throws its message
  }
}

}  // namespace

std::vector<LoraLayerScaling> LoraMerger::read_layers(const io::SafetensorsFile& file, const std::string& path,
                                                      LoraFilePlan& plan) const {
  const std::optional<LoraAdapterMetadata> config = adapter_metadata(file, path);
  plan.has_adapter_metadata = config.has_value();
  const std::vector<LoraTensorKey> keys = lora_tensor_keys(file);
  for (const LoraTensorKey& k : keys) plan.has_alphas = plan.has_alphas || ends_with(k.key, ".alpha");
  std::vector<LoraLayer> layers = map_lora_keys(keys, table_, facts_, path, &plan.ignored);
  std::vector<LoraLayerScaling> out;
  for (LoraLayer& layer : layers) {
    LoraLayerScaling f;
    check_factor_dtype(*file.find(layer.down_key), path);
    check_factor_dtype(*file.find(layer.up_key), path);
    if (layer.magnitude_key) check_factor_dtype(*file.find(*layer.magnitude_key), path);
    // diffusers reads kohya's alpha with .item() (a Python float); no alpha is alpha = rank.
    f.alpha = layer.alpha_key ? read_tensor(*file.find(*layer.alpha_key), path).to(at::kDouble).item<double>()
                              : static_cast<double>(layer.rank);
    if (!std::isfinite(f.alpha))
      throw InputError(quote(path) + ": " + quote(*layer.alpha_key, 80) + " is not a finite number");
    if (config) {
      // diffusers builds the layer from the metadata's LoraConfig, not from the tensors, and refuses
      // .alpha tensors beside it ("Both `network_alphas` and `metadata` cannot be specified").
      if (layer.alpha_key)
        throw InputError(quote(path) + ": it has both " + quote(*layer.alpha_key, 80) +
                         " and a lora_adapter_metadata, which diffusers refuses too; drop one of them");
      const LoraLayerScale s = config->scale_of(layer.component, layer.module);
      if (s.rank != layer.rank)
        throw InputError(quote(path) + ": its lora_adapter_metadata gives " +
                         quote(layer.component + "." + layer.module, 120) + " rank " + std::to_string(s.rank) +
                         ", but its factors have rank " + std::to_string(layer.rank) +
                         " (diffusers cannot load it either); re-save the LoRA with diffusers' save_lora_weights");
      f.alpha = s.alpha;  // PEFT's lora_alpha for this layer: scaling = scale * alpha / r in apply()
      // The header's use_dora decides whether PEFT makes DoRA layers: without it, diffusers leaves a file's
      // magnitudes unread; with it, a layer without one gets PEFT's initial magnitude. dpinfer does neither.
      if (config->uses_dora(layer.component) != layer.magnitude_key.has_value())
        throw InputError(quote(path) + ": its lora_adapter_metadata says " + layer.component + ".use_dora " +
                         (layer.magnitude_key ? "false" : "true") + ", but layer " +
                         quote(layer.component + "." + layer.module, 120) +
                         (layer.magnitude_key ? " has a DoRA magnitude (lora_magnitude_vector)" : " has no DoRA magnitude") +
                         "; re-save the LoRA with diffusers' save_lora_weights");
    }
    f.layer = std::move(layer);
    out.push_back(std::move(f));
  }
  return out;
}

LoraFilePlan LoraMerger::plan(const io::SafetensorsFile& file, const std::string& path) const {
  c10::InferenceMode guard;
  LoraFilePlan plan;
  plan.layers = read_layers(file, path, plan);
  std::vector<LoraLayerScaling*> layers;
  for (LoraLayerScaling& l : plan.layers) {
    if (l.layer.alpha_in_factors) l.alpha = static_cast<double>(l.layer.rank);  // as load() leaves it
    layers.push_back(&l);
  }
  if (!plan.has_adapter_metadata) infer_alphas(layers);
  return plan;
}

const LoraMerger::LoadedFile& LoraMerger::load(const std::string& path) {
  if (auto it = files_.find(path); it != files_.end()) return *it->second;
  const std::shared_ptr<const io::SafetensorsFile> file = open_lora_file(path);
  LoraFilePlan plan;
  std::vector<LoraLayerScaling> layers = read_layers(*file, path, plan);
  const bool config = plan.has_adapter_metadata;
  for (const std::string& line : plan.ignored) log::warn("--lora {}: ignoring {}", quote(path), line);
  // The factors, alpha / rank in them where the format puts it there; then the parts of fused layers.
  std::vector<Factors> factors;
  std::map<std::string, bool> block_diagonal;  // a fused layer's up key -> whether every part is
  for (LoraLayerScaling& scaling : layers) {
    Factors f;
    static_cast<LoraLayerScaling&>(f) = std::move(scaling);
    const LoraLayer& layer = f.layer;
    at::Tensor down = read_tensor(*file->find(layer.down_key), path);
    // _maybe_expand_lora_state_dict: the factor copied into torch.zeros(shape) (float32, the default dtype)
    // beyond its own columns.
    if (layer.down_padded_to > 0)
      down = at::constant_pad_nd(down.to(at::kFloat), {0, layer.down_padded_to - down.size(1)});
    at::Tensor up = read_tensor(*file->find(layer.up_key), path);
    if (layer.magnitude_key) f.magnitude = read_tensor(*file->find(*layer.magnitude_key), path);
    if (layer.alpha_in_factors) {
      // Ref: get_alpha_scales / _convert_to_ai_toolkit (lora_conversion_utils.py): alpha / rank split
      // between the factors, in the file's dtype; the adapter's own alpha is then its rank. Where the
      // converter divides the alpha tensor itself (LoraLayer::alpha_divided_in_its_dtype), the quotient
      // is rounded to its dtype (a bf16 alpha gives a bf16 scale). The same loop serves the kohya, the
      // underscored (_convert_mixture_state_dict_to_diffusers) and the Qwen-Image / Z-Image files.
      // read_layers() read the alpha as a double already; only this division needs the tensor itself.
      double scale_down = layer.alpha_divided_in_its_dtype && layer.alpha_key
                              ? (read_tensor(*file->find(*layer.alpha_key), path).reshape({}) / layer.rank)
                                    .to(at::kDouble)
                                    .item<double>()
                              : f.alpha / static_cast<double>(layer.rank);
      double scale_up = 1.0;
      while (scale_down * 2 < scale_up) {
        scale_down *= 2;
        scale_up /= 2;
      }
      down = down * scale_down;
      up = up * scale_up;
      f.alpha = static_cast<double>(layer.rank);
    }
    if (layer.up_rows) {
      auto it = block_diagonal.emplace(layer.up_key, true).first;
      it->second = it->second && layer.split_block_diagonal && part_is_block_diagonal(layer, up);
    }
    f.down = down;
    f.up = up;
    factors.push_back(std::move(f));
  }
  for (Factors& f : factors)
    if (f.layer.up_rows) take_part(f.layer, f.down, f.up, block_diagonal.at(f.layer.up_key));
  if (!config) {
    std::vector<LoraLayerScaling*> pointers;
    for (Factors& f : factors) pointers.push_back(&f);
    infer_alphas(pointers);
  }
  auto loaded = std::make_unique<LoadedFile>();
  for (Factors& f : factors) {
    const std::string key = f.layer.component + "/" + f.layer.module;
    if (unfused_.count(f.layer.component)) {
      // The component's weights are stored (float8 or GGUF blocks): its LoRAs stay unfused (attach()), which
      // dpinfer does for the layer kinds PEFT's lora.Linear and lora.Conv2d wrap, and for plain LoRAs only.
      if (auto kind = no_unfused_path_.find(key); kind != no_unfused_path_.end())
        throw InputError(quote(path) + ": it changes " + quote(f.layer.component + "." + f.layer.module, 120) +
                         ", a " + kind->second + " (no Linear or Conv2d), which has no unfused LoRA path, and the " +
                         f.layer.component +
                         "'s weights are stored, so dpinfer cannot merge into them; drop --lora or use "
                         "--weight-storage default with a safetensors checkpoint");
      if (f.magnitude.defined())
        throw InputError(quote(path) + ": layer " + quote(f.layer.component + "." + f.layer.module, 120) +
                         " is a DoRA layer, which dpinfer only merges into full-precision weights, and the " +
                         f.layer.component + "'s weights are stored; drop --lora or use --weight-storage default "
                         "with a safetensors checkpoint");
    }
    // PEFT's lora_A/lora_B layers take the base layer's dtype and device before the values load.
    auto known = weight_options_.find(key);
    if (known == weight_options_.end())
      throw Error("LoRA: " + f.layer.component + " has no weight " + f.layer.module + ".weight");
    if (unfused_.count(f.layer.component)) {
      // On the layer's compute device (with offload, set_offload's), where they stay attached: the layer they
      // serve computes there whenever it runs. attach() gives them their dtype.
      const at::Device target = compute_device_.value_or(known->second.device());
      f.down = f.down.to(target);
      f.up = f.up.to(target);
      loaded->layers.push_back(std::move(f));
      continue;
    }
    // A merged layer's factors wait in host memory, in the weight's dtype (the same values on any device): merge()
    // moves each layer's to the device it computes on, so a device holds no LoRA but the one layer it merges.
    const auto options = at::TensorOptions().dtype(known->second.dtype()).device(at::kCPU);
    f.down = f.down.to(options);
    f.up = f.up.to(options);
    if (f.magnitude.defined()) f.magnitude = f.magnitude.to(options);  // loaded into the DoRA layer's parameter
    loaded->layers.push_back(std::move(f));
  }
  return *files_.emplace(path, std::move(loaded)).first->second;
}

void LoraMerger::infer_alphas(const std::vector<LoraLayerScaling*>& factors) const {
  // Ref: diffusers 0.36 loaders/peft.py load_lora_adapter (the rank dict in the state dict's order:
  // a safetensors file's sorted keys, which its converters keep) and loaders/lora_base.py
  // _load_lora_into_text_encoder (text_encoder.named_modules() order), then get_peft_kwargs. The
  // network alphas keep the converter's order (the file's keys) for every component, text encoders too.
  std::map<std::string, std::vector<LoraLayerScaling*>> by_component;
  for (LoraLayerScaling* f : factors) by_component[f->layer.component].push_back(f);
  for (auto& [component, layers] : by_component) {
    std::vector<LoraNetworkAlpha> alphas;
    for (const LoraLayerScaling* f : layers) {
      // A network alpha: one the converter neither folds into the factors nor drops (map_lora_keys
      // resets alpha_key where it drops it); f->alpha is still the file's.
      if (!f->layer.alpha_key || f->layer.alpha_in_factors) continue;
      alphas.push_back({f->layer.alpha_reaches_no_module ? std::nullopt : std::optional<std::string>(f->layer.module),
                        f->alpha});
    }
    if (starts_with(component, "text_encoder"))
      std::stable_sort(layers.begin(), layers.end(), [&](const LoraLayerScaling* a, const LoraLayerScaling* b) {
        return module_order_.at(component + "/" + a->layer.module) < module_order_.at(component + "/" + b->layer.module);
      });
    std::vector<LoraLayerFacts> facts;
    for (const LoraLayerScaling* f : layers) facts.push_back({f->layer.module, f->layer.rank, std::nullopt});
    // FluxLoraLoaderMixin keeps the .alpha tensors as tensors; the kohya converter of the UNet
    // families gives floats (.item()).
    const bool tensors = !facts_.rules.kohya_unet;
    const LoraAdapterConfig config = infer_lora_adapter_config(facts, alphas, tensors);
    // With network alphas, every layer's lora_alpha is one of them: tensors, for FluxLoraLoaderMixin.
    const bool alpha_is_tensor = tensors && !alphas.empty();
    for (LoraLayerScaling* f : layers) {
      const LoraLayerScale s = lora_layer_scale(config, f->layer.module);
      if (s.rank != f->layer.rank)
        throw Error("LoRA: inferred rank " + std::to_string(s.rank) + " for " + f->layer.module + " of rank " +
                    std::to_string(f->layer.rank));  // cannot happen: rank_pattern lists every other rank
      f->alpha = s.alpha;
      f->alpha_is_tensor = alpha_is_tensor;
    }
  }
}

void LoraMerger::check(const io::LoraSet& set) {
  c10::InferenceMode guard;
  for (const io::LoraRef& ref : set) load(ref.path);
  keep_files_of(current_);
}

void LoraMerger::keep_files_of(const io::LoraSet& set) {
  // A run that sweeps many LoRAs (a set per line) would otherwise hold every file it checked; a set that comes
  // back is read again, to the same values.
  for (auto it = files_.begin(); it != files_.end();) {
    const bool in_set =
        std::any_of(set.begin(), set.end(), [&](const io::LoraRef& ref) { return ref.path == it->first; });
    it = in_set ? std::next(it) : files_.erase(it);
  }
}

bool LoraMerger::apply(const io::LoraSet& set) {
  if (set == current_) return false;
  c10::InferenceMode guard;
  for (const io::LoraRef& ref : set) load(ref.path);  // every file read before any weight changes
  detach_adapters();
  for (auto& [key, original] : originals_) {  // none of a detached component (detach() dropped them)
    const size_t slash = key.find('/');
    weight(key.substr(0, slash), key.substr(slash + 1)).copy_(original);
  }
  // A detached component gets the set when reattach() brings it back.
  merge(set, [this](const std::string& component) { return !detached_.count(component); });
  current_ = set;
  keep_files_of(set);
  return true;
}

void LoraMerger::merge(const io::LoraSet& set, const std::function<bool(const std::string& component)>& only) {
  for (const io::LoraRef& ref : set) {
    for (const Factors& f : files_.at(ref.path)->layers) {
      if (!only(f.layer.component)) continue;
      if (unfused_.count(f.layer.component)) {
        attach(f, ref.scale);
        continue;
      }
      const at::Tensor stored = weight(f.layer.component, f.layer.module);
      const std::string key = f.layer.component + "/" + f.layer.module;
      // The originals wait in host memory: a GPU then holds no second copy of the weights a LoRA touches, which
      // for a LoRA on every attention and MLP layer would be most of the denoiser. Restoring copies them back.
      if (!originals_.count(key))
        originals_.emplace(key, stored.is_cpu() ? stored.clone()
                                                : stored.to(at::Device(at::kCPU), stored.scalar_type(), false, true));
      // With offload the weight may be in host memory between uses: merged on the device the run
      // computes on (the values a run without offload merges), then written back where it is.
      at::Tensor w = compute_device_ && stored.device() != *compute_device_ ? stored.to(*compute_device_) : stored;
      const at::Tensor delta =
          delta_weight(f.down.to(w.device()), f.up.to(w.device()), w, peft_scaling(f, ref.scale));
      // PEFT merge: base_layer.weight.data += delta; a DoRA layer's weight becomes its own rescaled sum, from the
      // weight the LoRAs before it left (each adapter merges in turn).
      if (f.magnitude.defined()) w.copy_(dora_merged(w, delta, f.magnitude.to(w.device())));
      else w.add_(delta);
      if (!w.is_same(stored)) stored.copy_(w);
    }
  }
}

void LoraMerger::attach(const Factors& f, double scale) {
  const std::string key = f.layer.component + "/" + f.layer.module;
  auto it = layers_.find(key);
  if (it == layers_.end()) throw Error("LoRA: " + f.layer.component + " has no layer " + f.layer.module);
  nn::WeightedLayer& layer = *it->second;
  nn::WeightedLayer::LoraAdapter a;
  // Ref: peft 0.17 tuners/tuners_utils.py _move_adapter_to_device_of_base_layer, which set_peft_model_state_dict
  // (low_cpu_mem_usage, diffusers 0.36's default) calls once the factors are assigned: lora_A and lora_B take the
  // base weight's dtype when it is a float dtype, else keep the file's. A GGUFLinear's weight is its uint8 blocks
  // (GGUFParameter), so a GGUF layer's factors keep the dtype the file gives them. A float8-stored layer's weight
  // is still in the run dtype then: diffusers' LoRA-with-layerwise-casting order (tests/lora/utils.py
  // test_layerwise_casting_inference_denoiser) loads the LoRA first and enable_layerwise_casting() skips PEFT's
  // lora_A / lora_B (ModelMixin.enable_layerwise_casting adds LoraLayer.adapter_layer_names to the skip patterns).
  const at::ScalarType dtype = layer.gguf_type() ? f.down.scalar_type() : layer.compute_dtype();
  a.down = f.down.to(dtype);
  a.up = f.up.to(dtype);
  // The number merge() scales by; where lora_alpha is a tensor, PEFT multiplies by it as a 0-d float32 tensor.
  a.scaling = peft_scaling(f, scale);
  if (f.alpha_is_tensor)
    a.scaling_tensor = at::scalar_tensor(static_cast<float>(a.scaling), at::TensorOptions().dtype(at::kFloat));
  layer.add_lora(std::move(a));
  attached_.insert(key);
}

void LoraMerger::detach_adapters() {
  for (const std::string& key : attached_)
    if (auto it = layers_.find(key); it != layers_.end()) it->second->clear_loras();
  attached_.clear();
}

std::string LoraMerger::key_for(const std::string& component) const {
  std::string key;
  for (const io::LoraRef& ref : current_) {
    auto it = files_.find(ref.path);
    if (it == files_.end()) continue;
    bool touches = false;
    for (const Factors& f : it->second->layers) touches = touches || f.layer.component == component;
    if (touches) key += fmt::format("{}{}:{}", key.empty() ? "" : "|", ref.path, ref.scale);
  }
  return key;
}

}  // namespace dpinfer::pipeline

#pragma once
// LoRAs merged into a loaded model's weights, and taken out again: the design behind
// --lora and a prompts line's "loras" (README, "LoRA").
//
// A set of LoRAs is merged into the weights it touches, exactly as diffusers' fuse_lora
// merges them (PEFT's get_delta_weight, W += (B @ A) * scaling, one LoRA after the other;
// a DoRA layer: W = m / ||W + dW|| * (W + dW), its norm per output row).
// Before a weight first changes, its original values are kept (only the touched weights,
// on their device). A batch with another set first copies those originals back, then
// merges its own set: consecutive items with different LoRAs never reload the model, and
// a batch runs at the full speed of merged weights. The worker groups items by LoRA set
// as it groups them by size, so a sweep re-merges only where the set changes.
//
// A component whose weights are stored (--weight-storage fp8, a GGUF transformer file) keeps its LoRAs
// unfused instead, as diffusers does: PEFT's lora layers beside the quantized or float8 ones, which
// diffusers' fuse_lora cannot merge into (a GGUFParameter's blocks, a float8 weight outside the hook's
// forward). Each of its touched layers gets the set's adapters attached (nn::WeightedLayer::add_lora) and
// computes PEFT's lora.Linear.forward; another set detaches them and attaches its own.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::io {
class SafetensorsFile;
}  // namespace dpinfer::io

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline::nn {
class WeightedLayer;
}  // namespace dpinfer::pipeline::nn

namespace dpinfer::pipeline {

/// One layer of a LoRA file with the alpha PEFT gives it, from the file's header and its alpha tensors
/// alone (no factors read): what LoraMerger::plan() tells `dpinfer inspect --lora` (lora_inspect.h).
struct LoraLayerScaling {
  LoraLayer layer;
  /// PEFT's lora_alpha: the adapter metadata's, or what diffusers' get_peft_kwargs infers for the
  /// layer (infer_lora_adapter_config; the component's first layer's rank where no layer has an alpha)
  double alpha = 0;
  /// PEFT holds this layer's lora_alpha as a float32 tensor (a FLUX.1 file's .alpha tensors), so its
  /// scaling is computed in float32.
  bool alpha_is_tensor = false;
};

/// The names and shapes of a LoRA file's tensors, from its header, as map_lora_keys takes them.
std::vector<LoraTensorKey> lora_tensor_keys(const io::SafetensorsFile& file);

/// What LoraMerger::plan() reads of a file: its layers, as load() reads them before the factors.
struct LoraFilePlan {
  std::vector<LoraLayerScaling> layers;
  /// map_lora_keys' lines for the keys diffusers drops without reading (warned about by --lora).
  std::vector<std::string> ignored;
  bool has_adapter_metadata = false;  ///< the header's lora_adapter_metadata decides the alphas
  bool has_alphas = false;            ///< the file has .alpha tensors
};

class LoraMerger {
 public:
  /// `facts` name the model in messages and give the UNet's block layout.
  explicit LoraMerger(LoraModelFacts facts) : facts_(std::move(facts)) {}

  /// Registers a component ("unet") whose Linear and Conv2d weights LoRAs may change. `unfused`: its
  /// weights are stored (float8 or GGUF blocks, component_stores_weights()), so LoRAs attach to its layers
  /// unfused rather than merge into them.
  void add_component(const std::string& name, torch::nn::Module& module, bool unfused = false);

  /// Registers component `name` before it is loaded (two-phase chunks load the denoiser when it is
  /// first needed): `shapes` is the module built on the meta device, `options` the dtype and device
  /// its weights will have. It is detached until reattach() brings the loaded module.
  void add_detached(const std::string& name, torch::nn::Module& shapes, const at::TensorOptions& options,
                    bool unfused = false);

  /// Forgets the weights of registered component `name`, which is being released from the device
  /// (two-phase chunks, component_residency.h): no handle to them or copy of their originals stays,
  /// so their memory can go. check() and apply() go on as if it were there; reattach() brings it back.
  void detach(const std::string& name);
  /// Registers `module` as component `name` again, loaded anew from its files (the weights before
  /// any LoRA), and merges into it what the set in place does to it.
  void reattach(const std::string& name, torch::nn::Module& module);

  /// --offload (nn/offload.h): the registered weights move between host memory and `device` (the one
  /// the run computes on). From now on an unfused component's LoRA factors are kept on `device`, and each merge
  /// is computed there and written back where the weight is.
  void set_offload(const at::Device& device) { compute_device_ = device; }

  /// Reads each file of `set` and checks it against the registered components. Throws InputError naming the
  /// file. Only the files of the set in place stay read (keep_files_of).
  void check(const io::LoraSet& set);

  /// Makes the weights those of `set`: nothing when it is the set in place; otherwise the
  /// touched weights get their original values back (kept in host memory) and `set` is merged. Returns whether
  /// any weight changed. Each file is read when its set comes (again), and dropped when the set goes.
  bool apply(const io::LoraSet& set);

  /// The layers of the LoRA `file` (opened from `path`, which messages name) mapped onto the registered
  /// components, with their alphas, as check() finds them, reading only the one-number alpha tensors: the
  /// same errors (map_lora_keys', the adapter metadata's, a factor that is no float tensor). The ranks
  /// are the file's: a fused layer's block-diagonal up factor (LoraLayer::up_rows), which only its values
  /// reveal, is merged at rank / parts.
  LoraFilePlan plan(const io::SafetensorsFile& file, const std::string& path) const;

  /// The modules LoRAs may change, per registered component (their weights' shapes).
  const LoraModuleTable& modules() const { return table_; }

  /// The set merged now.
  const io::LoraSet& current() const { return current_; }

  /// A key for what the LoRAs in place do to `component` ("" when none touches it): the
  /// text-encoder caches key their entries by it.
  std::string key_for(const std::string& component) const;

 private:
  struct Factors : LoraLayerScaling {
    /// in the weight's dtype, in host memory (merge() moves them); for an unfused component, on its compute
    /// device in the dtype the file and its conversion give them (attach() casts them as PEFT does)
    at::Tensor down, up;
    at::Tensor magnitude;  ///< DoRA's lora_magnitude_vector (LoraLayer::magnitude_key), likewise; undefined: none
  };
  struct LoadedFile {
    std::vector<Factors> layers;
  };
  const LoadedFile& load(const std::string& path);
  /// Each layer's alpha as diffusers infers its LoraConfig for a file without adapter metadata, from
  /// the layers in map_lora_keys' order (a text encoder's sorted into its modules' order).
  void infer_alphas(const std::vector<LoraLayerScaling*>& layers) const;
  /// The file's layers, each with the alpha the file or its adapter metadata gives it (alpha = rank
  /// where neither does), before alpha_in_factors and infer_alphas; `plan` gets the rest of its fields.
  std::vector<LoraLayerScaling> read_layers(const io::SafetensorsFile& file, const std::string& path,
                                            LoraFilePlan& plan) const;
  at::Tensor weight(const std::string& component, const std::string& module);
  /// Keeps the weights of `module` that LoRAs may change, as component `name`: their handles unless
  /// `options` is given (a meta module's shapes, for weights of those options yet to load).
  void register_weights(const std::string& name, torch::nn::Module& module,
                        const std::optional<at::TensorOptions>& options = std::nullopt);
  /// Merges the layers of `set` that change components `only` selects, in the set's order (attaches them,
  /// in an unfused component).
  void merge(const io::LoraSet& set, const std::function<bool(const std::string& component)>& only);
  /// Attaches factors `f` at `scale` to their layer of an unfused component.
  void attach(const Factors& f, double scale);
  /// Detaches every adapter attach() attached.
  void detach_adapters();
  /// Drops the read files that are not in `set`.
  void keep_files_of(const io::LoraSet& set);

  LoraModelFacts facts_;
  /// "<component>/<module>" -> the weight a LoRA may change (Linear and Conv2d weights).
  std::map<std::string, at::Tensor> weights_;
  /// "<component>/<module>" -> the weight's dtype and device, which a LoRA's factors take; kept while
  /// the component is detached.
  std::map<std::string, at::TensorOptions> weight_options_;
  /// The components detach() released.
  std::set<std::string> detached_;
  /// The components whose LoRAs stay unfused (add_component's `unfused`).
  std::set<std::string> unfused_;
  /// "<component>/<module>" -> the layer of an unfused, attached component a LoRA may change (the module
  /// owns it; detach() drops the pointers).
  std::map<std::string, nn::WeightedLayer*> layers_;
  /// "<component>/<module>" -> the C++ class of a module of an unfused component whose weight a LoRA may change
  /// but that is no nn::WeightedLayer, so has no unfused LoRA path (refused by load()).
  std::map<std::string, std::string> no_unfused_path_;
  /// The keys of layers_ that have adapters attached.
  std::set<std::string> attached_;
  /// "<component>/<module>" -> its place in the component's named_modules order (diffusers lists a
  /// text encoder's LoRA layers in that order).
  std::map<std::string, size_t> module_order_;
  LoraModuleTable table_;
  std::map<std::string, std::unique_ptr<LoadedFile>> files_;
  /// "<component>/<module>" -> the weight's values before any LoRA, for the weights touched, in host memory.
  std::map<std::string, at::Tensor> originals_;
  io::LoraSet current_;
  std::optional<at::Device> compute_device_;  ///< set_offload()
};

}  // namespace dpinfer::pipeline

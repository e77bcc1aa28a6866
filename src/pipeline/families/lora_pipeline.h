#pragma once
// What every family shares around its modules: the --lora wiring (README, "LoRA"), the cache of
// text-encoder outputs, and two-phase chunks (issue 26; component_residency.h).
//
// A family calls start_components() first in its constructor, loads its text encoders with
// load_text_encoder() and then its denoiser with load_denoiser() (the VAE as it likes), calls
// use_loras() first in generate(), keys its cache entries by lora_key() of each encoder, runs every
// encoder inside a cache miss after encoder_phase(), calls denoiser_phase() before it denoises, and
// loads its VAE with load_vae() and calls vae_phase() before each VAE encode or decode (the VAE may be released
// between two phases: the family reads it through its member at each use).
// encode_prompts() makes the same encoder calls generate() makes, so that prepare() can make them
// for a whole chunk ahead: generate() then finds each one in the cache.

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <c10/core/InferenceMode.h>

#include "component_residency.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/families/prompt_embedding_cache.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/offload.h"
#include "dpinfer/pipeline/text_to_image.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

class LoraPipeline : public TextToImage {
 public:
  void check_loras(const io::LoraSet& loras) override;
  void prepare(const std::vector<std::vector<ImageRequest>>& chunk) override;
  std::vector<std::string> resident_components() const override { return residency_.resident(); }
  std::vector<std::string> components_on_device() const override { return residency_.on_device(); }
  nlohmann::json offload_statistics() const override;

 protected:
  using Group = ComponentResidency::Group;

  /// Makes the merger, with the family's key rules (Family::lora_rules), and sets two-phase
  /// chunks (request.two_phase) and offload (request.offload) on or off. `layers_per_block`: the UNet's,
  /// for kohya's SGM names.
  void start_components(const Family& family, const LoadRequest& request, int64_t layers_per_block = 2);

  /// Loads component `name` of `md` into `member`, registered for LoRAs when `lora` (the family's
  /// _lora_loadable_modules), and as a text encoder two-phase chunks release.
  template <typename Impl>
  void load_text_encoder(const ModelDir& md, const std::string& name, std::shared_ptr<Impl>& member,
                         const at::TensorOptions& options, bool lora) {
    load_slot(Group::kTextEncoders, md.at(name), member, options, lora);
  }
  /// A text encoder the family reads under a class of its choosing from `c` (a component's folder, e.g. Qwen-Image-
  /// Edit's vision tower from the text_encoder's files), released and brought back with the text encoders; no LoRA.
  template <typename Impl>
  void load_text_encoder(const Component& c, std::shared_ptr<Impl>& member, const at::TensorOptions& options) {
    load_slot(Group::kTextEncoders, c, member, options, /*lora=*/false);
  }
  /// The same for the denoiser. With two-phase, its files are checked (check_component) but it loads
  /// when first needed, once the text encoders are released: a chunk's encoding comes first. With
  /// --offload blocks it loads into host memory and its blocks stay there between uses (nn/offload.h);
  /// a denoiser without block lists (the UNet) refuses that in one line.
  template <typename Impl>
  void load_denoiser(const ModelDir& md, const std::string& name, std::shared_ptr<Impl>& member,
                     const at::TensorOptions& options) {
    if constexpr (!std::is_base_of_v<nn::OffloadableBlocks, Impl>) {
      if (block_offload_ > 0)
        throw InputError("--offload blocks: the " + name + " has no transformer blocks to offload in groups; use "
                         "--offload model");
    }
    load_slot(Group::kDenoiser, md.at(name), member, options, /*lora=*/true);
  }
  /// The VAE, with --vae-tiling's `tiling` set on it at each load. With two-phase it loads when first needed
  /// (vae_phase()) and the text encoders' phase releases it, as the denoiser's; with --offload model it is on the
  /// device only between vae_phase() and the next phase; otherwise it stays resident.
  template <typename Impl>
  void load_vae(const ModelDir& md, const std::string& name, std::shared_ptr<Impl>& member,
                const at::TensorOptions& options, bool tiling, const LoadOptions& load_options = {}) {
    load_slot(Group::kVae, md.at(name), member, options, /*lora=*/false, load_options,
              std::function<void(Impl&)>([tiling](Impl& vae) { vae.set_tiling(tiling); }));  // enable_tiling()
  }

  /// Puts the batch's LoRAs in place: a no-op when they are the set merged already. Call first
  /// in generate(), before the text encoders run.
  void use_loras(const std::vector<ImageRequest>& batch) { loras_->apply(batch.front().loras); }

  /// What the LoRAs in place do to `component` ("" when none touches it), for cache keys.
  std::string lora_key(const std::string& component) const { return loras_->key_for(component); }

  /// Call before running a text encoder (inside a cache miss): with two-phase, the denoiser goes
  /// and the encoders come back.
  void encoder_phase() { residency_.enter(Group::kTextEncoders); }
  /// Call before denoising: with two-phase, the encoders go and the denoiser comes back.
  void denoiser_phase() { residency_.enter(Group::kDenoiser); }
  /// Call before a VAE encode or decode: with --offload model, the VAE comes to the device.
  void vae_phase() { residency_.enter(Group::kVae); }

  /// Makes every text-encoder call generate() makes for `batch`, through embeddings_, the batch's
  /// LoRAs in place, under InferenceMode. Throws what generate() throws for the batch's settings.
  virtual void encode_prompts(const std::vector<ImageRequest>& batch) = 0;

  PromptEmbeddingCache embeddings_{kPromptEmbeddingCacheEntries, kPromptEmbeddingCacheBytes};

 private:
  /// `configure`: what the family sets on the module after each load (the VAE's tiling), or null.
  template <typename Impl>
  void load_slot(Group group, const Component& c, std::shared_ptr<Impl>& member, const at::TensorOptions& options,
                 bool lora, const LoadOptions& load_options = {}, std::function<void(Impl&)> configure = nullptr) {
    // Offloaded modules load into host memory: model offload moves them whole to the device when they
    // run (enter()), block offload moves the non-block part of the denoiser, and of a text encoder with
    // layer lists (T5, the Qwen decoders; CLIP is small and stays whole), there at once.
    const bool blocks = block_offload_ > 0 && std::is_base_of_v<nn::OffloadableBlocks, Impl> &&
                        (group == Group::kDenoiser || group == Group::kTextEncoders);
    const at::TensorOptions load_to =
        residency_.model_offload() || blocks ? options.device(c10::Device(c10::kCPU)) : options;
    const bool channels_last = channels_last_ && group != Group::kTextEncoders;
    auto load = [&member, c, load_to, load_options, blocks, channels_last, device = options.device(),
                 per_group = block_offload_, configure]() -> torch::nn::Module& {
      c10::InferenceMode guard;
      member = load_component_as<Impl>(c, load_to, load_options);
      if (configure) configure(*member);
      // Before block offload takes its host copies, which keep the strides (nn/offload.h).
      if (channels_last) nn::to_channels_last(*member);
      if constexpr (std::is_base_of_v<nn::OffloadableBlocks, Impl>) {
        if (blocks) member->offload_blocks(*member, device, per_group);
      }
      return *member;
    };
    // A component with stored weights (float8, GGUF blocks) keeps its LoRAs unfused (loading/lora.h).
    const bool unfused = lora && component_stores_weights(c);
    if constexpr (std::is_base_of_v<nn::OffloadableBlocks, Impl>) {
      const auto accounting = [&member]() -> const nn::BlockOffload* {
        return member ? member->block_offload() : nullptr;
      };
      if (blocks && group == Group::kDenoiser) denoiser_blocks_ = accounting;
      if (blocks && group == Group::kTextEncoders) text_encoder_blocks_.push_back(accounting);
    }
    // Two-phase loads the denoiser and the VAE when first needed: a chunk's encoding comes first, alone.
    if (residency_.two_phase() && (group == Group::kDenoiser || group == Group::kVae)) {
      const std::shared_ptr<torch::nn::Module> shapes = check_component(c, load_to);
      if (lora) loras_->add_detached(c.name, *shapes, load_to, unfused);
    } else {
      residency_.make_room(group);
      load();
      if (lora) loras_->add_component(c.name, *member, unfused);
    }
    residency_.add(
        group, c.name, [&member] { member.reset(); }, load,
        [&member]() -> torch::nn::Module* { return member.get(); }, lora ? loras_.get() : nullptr,
        /*on_device=*/!residency_.model_offload());
  }

  std::unique_ptr<LoraMerger> loras_;
  ComponentResidency residency_;
  bool channels_last_ = false;  ///< --channels-last: the denoiser's and the VAE's 4-D weights (LoadRequest)
  int64_t block_offload_ = 0;  ///< --offload blocks: blocks a group (LoadRequest::offload_blocks_per_group); 0: off
  /// The denoiser's block offload accounting, read by offload_statistics() (null unless --offload blocks).
  std::function<const nn::BlockOffload*()> denoiser_blocks_;
  /// The same for each text encoder whose layers --offload blocks keeps in host memory.
  std::vector<std::function<const nn::BlockOffload*()>> text_encoder_blocks_;
};

}  // namespace dpinfer::pipeline

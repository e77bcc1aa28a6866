#pragma once
// What every family shares around its modules: the --lora wiring (README, "LoRA"), the cache of
// text-encoder outputs, and two-phase chunks (issue 26; component_residency.h).
//
// A family calls start_components() first in its constructor, loads its text encoders with
// load_text_encoder() and then its denoiser with load_denoiser() (the VAE as it likes), calls
// use_loras() first in generate(), keys its cache entries by lora_key() of each encoder, runs every
// encoder inside a cache miss after encoder_phase(), and calls denoiser_phase() before it denoises.
// encode_prompts() makes the same encoder calls generate() makes, so that prepare() can make them
// for a whole chunk ahead: generate() then finds each one in the cache.

#include <memory>
#include <string>
#include <vector>

#include <c10/core/InferenceMode.h>

#include "component_residency.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/families/prompt_embedding_cache.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

class LoraPipeline : public TextToImage {
 public:
  void check_loras(const io::LoraSet& loras) override;
  void prepare(const std::vector<std::vector<ImageRequest>>& chunk) override;
  std::vector<std::string> resident_components() const override { return residency_.resident(); }

 protected:
  using Group = ComponentResidency::Group;

  /// Makes the merger, with the family's key rules (lora_key_rules(family.name)), and sets two-phase
  /// chunks on or off (request.two_phase). `layers_per_block`: the UNet's, for kohya's SGM names.
  void start_components(const Family& family, const LoadRequest& request, int64_t layers_per_block = 2);

  /// Loads component `name` of `md` into `member`, registered for LoRAs when `lora` (the family's
  /// _lora_loadable_modules), and as a text encoder two-phase chunks release.
  template <typename Impl>
  void load_text_encoder(const ModelDir& md, const std::string& name, std::shared_ptr<Impl>& member,
                         const at::TensorOptions& options, bool lora) {
    load_slot(Group::kTextEncoders, md.at(name), member, options, lora);
  }
  /// The same for the denoiser. With two-phase, its files are checked (check_component) but it loads
  /// when first needed, once the text encoders are released: a chunk's encoding comes first.
  template <typename Impl>
  void load_denoiser(const ModelDir& md, const std::string& name, std::shared_ptr<Impl>& member,
                     const at::TensorOptions& options) {
    load_slot(Group::kDenoiser, md.at(name), member, options, /*lora=*/true);
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

  /// Makes every text-encoder call generate() makes for `batch`, through embeddings_, the batch's
  /// LoRAs in place, under InferenceMode. Throws what generate() throws for the batch's settings.
  virtual void encode_prompts(const std::vector<ImageRequest>& batch) = 0;

  PromptEmbeddingCache embeddings_{kPromptEmbeddingCacheEntries, kPromptEmbeddingCacheBytes};

 private:
  template <typename Impl>
  void load_slot(Group group, const Component& c, std::shared_ptr<Impl>& member, const at::TensorOptions& options,
                 bool lora) {
    auto load = [&member, c, options]() -> torch::nn::Module& {
      c10::InferenceMode guard;
      member = load_component_as<Impl>(c, options);
      return *member;
    };
    // A component with stored weights (float8, GGUF blocks) keeps its LoRAs unfused (loading/lora.h).
    const bool unfused = lora && component_stores_weights(c);
    if (residency_.two_phase() && group == Group::kDenoiser) {
      const std::shared_ptr<torch::nn::Module> shapes = check_component(c, options);
      if (lora) loras_->add_detached(c.name, *shapes, options, unfused);
    } else {
      residency_.enter(group);
      load();
      if (lora) loras_->add_component(c.name, *member, unfused);
    }
    residency_.add(group, c.name, [&member] { member.reset(); }, load, [&member] { return member != nullptr; },
                   lora ? loras_.get() : nullptr);
  }

  std::unique_ptr<LoraMerger> loras_;
  ComponentResidency residency_;
};

}  // namespace dpinfer::pipeline

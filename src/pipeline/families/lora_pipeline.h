#pragma once
// The --lora wiring every family shares (README, "LoRA"): the merger over the components a
// LoRA may change, the check the worker asks for before any item, and the per-batch switch to
// the batch's LoRA set. A family makes the merger once its weights are loaded (start_loras),
// registers each component LoRAs may change, calls use_loras() first in generate(), and keys
// any cache of text-encoder outputs by lora_key() of that encoder.

#include <memory>
#include <string>
#include <vector>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::pipeline {

class LoraPipeline : public TextToImage {
 public:
  void check_loras(const io::LoraSet& loras) override { loras_->check(loras); }

 protected:
  /// Makes the merger, with the family's key rules (lora_key_rules(family.name)); then register
  /// the components with add_component(). `layers_per_block`: the UNet's, for kohya's SGM names.
  LoraMerger& start_loras(const Family& family, int64_t layers_per_block = 2) {
    loras_ = std::make_unique<LoraMerger>(
        LoraModelFacts{family.label, layers_per_block, lora_key_rules(family.name)});
    return *loras_;
  }

  /// Puts the batch's LoRAs in place: a no-op when they are the set merged already. Call first
  /// in generate(), before the text encoders run.
  void use_loras(const std::vector<ImageRequest>& batch) { loras_->apply(batch.front().loras); }

  /// The merger start_loras() made, to register more components.
  LoraMerger& loras() { return *loras_; }

  /// What the LoRAs in place do to `component` ("" when none touches it), for cache keys.
  std::string lora_key(const std::string& component) const { return loras_->key_for(component); }

 private:
  std::unique_ptr<LoraMerger> loras_;
};

}  // namespace dpinfer::pipeline

#include "lora_pipeline.h"

#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {

void LoraPipeline::start_components(const Family& family, const LoadRequest& request, int64_t layers_per_block) {
  loras_ = std::make_unique<LoraMerger>(LoraModelFacts{family.label, layers_per_block, lora_key_rules(family.name)});
  residency_ = ComponentResidency(request.two_phase);
  // The chunk's encodings wait in host memory while the denoiser has the device.
  embeddings_.store_on_host(request.two_phase);
}

void LoraPipeline::check_loras(const io::LoraSet& loras) {
  // With stored weights (--weight-storage fp8, a GGUF transformer file) the LoRAs stay unfused on the stored
  // components' layers (loading/lora.h); LoraMerger::check refuses what has no unfused path there.
  loras_->check(loras);
}

void LoraPipeline::prepare(const std::vector<std::vector<ImageRequest>>& chunk) {
  embeddings_.begin_chunk();
  struct EndChunk {
    PromptEmbeddingCache& cache;
    ~EndChunk() { cache.end_chunk(); }
  } end_chunk{embeddings_};
  for (const std::vector<ImageRequest>& batch : chunk) {
    if (batch.empty()) continue;
    throw_if_cancelled();
    try {
      use_loras(batch);
      c10::InferenceMode guard;
      encode_prompts(batch);
    } catch (const Cancelled&) {
      throw;
    } catch (const std::exception& e) {
      // generate() meets the same error on this batch and reports it there, item by item.
      log::debug("two-phase: a batch of {} was not encoded ahead: {}", batch.size(), e.what());
    }
  }
  denoiser_phase();
}

}  // namespace dpinfer::pipeline

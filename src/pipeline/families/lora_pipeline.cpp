#include "lora_pipeline.h"

#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {

void LoraPipeline::start_components(const Family& family, const LoadRequest& request, int64_t layers_per_block) {
  loras_ = std::make_unique<LoraMerger>(LoraModelFacts{family.label, layers_per_block, lora_key_rules(family.name)});
  residency_ = ComponentResidency(request.two_phase);
  weight_storage_ = request.weight_storage;
  // The chunk's encodings wait in host memory while the denoiser has the device.
  embeddings_.store_on_host(request.two_phase);
}

void LoraPipeline::check_loras(const io::LoraSet& loras) {
  // A merge into float8 weights would round the sum to float8, which neither diffusers' fused nor its unfused
  // LoRA computes (the denoiser's layers are stored under either fp8 value).
  // A GGUF transformer file's Linear weights are its quantized blocks (PipelineInfo::weight_storage "gguf-Q4_K").
  const std::string& storage = info().weight_storage;
  if (!loras.empty() && storage.rfind("gguf-", 0) == 0)
    throw InputError(loras.front().path + ": the denoiser's weights are a GGUF file's quantized blocks (" + storage +
                     "), and dpinfer merges LoRAs into full-precision weights; drop --lora or use a safetensors "
                     "checkpoint");
  if (!loras.empty() && weight_storage_ != "default")
    throw InputError(loras.front().path + ": --weight-storage " + weight_storage_ +
                     " keeps the denoiser's weights in float8, and dpinfer merges LoRAs into full-precision weights; "
                     "drop --lora or use --weight-storage default");
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

#include "lora_pipeline.h"

#include <algorithm>

#include "dpinfer/pipeline/device_memory.h"

#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {

void LoraPipeline::start_components(const Family& family, const LoadRequest& request, int64_t layers_per_block) {
  loras_ = std::make_unique<LoraMerger>(LoraModelFacts{family.label, layers_per_block, family.lora_rules()});
  if (request.offload != "none" && request.offload != "model" && request.offload != "blocks")
    throw InputError("--offload: expected none, model or blocks[:N], got " + request.offload);
  if (request.offload == "blocks" && request.offload_blocks_per_group < 1)
    throw InputError("--offload blocks:N: expected N of 1 or more blocks a group, got " +
                     std::to_string(request.offload_blocks_per_group));
  const c10::Device device(request.device);
  residency_ = ComponentResidency(request.two_phase, request.offload == "model", device);
  block_offload_ = request.offload == "blocks" ? request.offload_blocks_per_group : 0;
  channels_last_ = request.channels_last;
  // Offloaded weights are merged with LoRAs on the device the run computes on, wherever they are
  // between uses, so that the merged values are those of a run without offload.
  if (request.offload != "none") loras_->set_offload(device);
  // The chunk's encodings wait in host memory while the denoiser has the device.
  embeddings_.store_on_host(request.two_phase);
}

nlohmann::json LoraPipeline::offload_statistics() const {
  nlohmann::json j = nlohmann::json::object();
  if (const auto peaks = residency_.phase_peaks(); !peaks.empty()) {
    j["peak_bytes_by_phase"] = peaks;
    int64_t peak = 0;  // each phase starts a new peak (ComponentResidency): the run's is the largest
    for (const auto& [phase, bytes] : peaks) peak = std::max(peak, bytes);
    j["peak_bytes"] = peak;
  }
  if (residency_.model_offload()) {
    j["moves_to_device"] = residency_.moves_to_device();
    j["bytes_to_device"] = residency_.bytes_to_device();
  }
  if (const nn::BlockOffload* b = denoiser_blocks_ ? denoiser_blocks_() : nullptr) {
    j["block_groups"] = b->groups();
    j["blocks_per_group"] = b->per_group();
    j["resident_groups"] = b->resident_groups();
    j["max_resident_groups"] = b->max_resident_groups();
    j["group_copies"] = b->copies_to_device();
    j["offloaded_bytes"] = b->offloaded_bytes();
    j["largest_group_bytes"] = b->largest_group_bytes();
  }
  // The text encoders' layers (T5, the Qwen decoders), all of them together; absent while none is loaded.
  int64_t text_groups = 0, text_copies = 0, text_bytes = 0, text_resident = 0;
  for (const auto& blocks : text_encoder_blocks_)
    if (const nn::BlockOffload* b = blocks()) {
      text_groups += b->groups();
      text_copies += b->copies_to_device();
      text_bytes += b->offloaded_bytes();
      text_resident += b->resident_groups();
    }
  if (text_groups > 0) {
    j["text_encoder_block_groups"] = text_groups;
    j["text_encoder_group_copies"] = text_copies;
    j["text_encoder_offloaded_bytes"] = text_bytes;
    j["text_encoder_resident_groups"] = text_resident;
  }
  return j;
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

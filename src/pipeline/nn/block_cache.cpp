#include "dpinfer/pipeline/nn/block_cache.h"

namespace dpinfer::pipeline::nn {

void BlockCache::count_into(nlohmann::json& statistics) const {
  statistics["denoiser_calls"] = statistics.value("denoiser_calls", int64_t{0}) + calls_;
  statistics["denoiser_calls_cached"] = statistics.value("denoiser_calls_cached", int64_t{0}) + skipped_;
  statistics["step_cache"] = name();
  statistics["step_cache_skip"] = skips();
}

// diffusers 0.36.0 hooks/first_block_cache.py _should_compute_remaining_blocks; cache-dit 1.5.3
// caching/cache_contexts/cache_manager.py similarity() (important_condition_threshold 0).
double relative_change(const at::Tensor& now, const at::Tensor& before) {
  const at::Tensor absmean = (now - before).abs().mean();
  return (absmean / before.abs().mean()).item<double>();
}

}  // namespace dpinfer::pipeline::nn

// Ref: DeepCache 0.1.1 (PyPI), DeepCache/extension/deepcache.py: DeepCacheSDHelper.set_params, is_skip_step,
// wrap_unet_forward. The UNet side is UNet2DConditionModelImpl::forward (unet_2d_condition.cpp).
#include "dpinfer/pipeline/models/unets/deep_cache.h"

#include <algorithm>
#include <string>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

DeepCache::DeepCache(int64_t interval, int64_t branch_id) : interval_(interval) {
  if (interval < 1) throw InputError("deep_cache_interval " + std::to_string(interval) + ": must be 1 or more");
  if (branch_id < 0) throw InputError("deep_cache_branch " + std::to_string(branch_id) + ": must be 0 or more");
  // set_params: cache_layer_id = cache_branch_id % 3, cache_block_id = cache_branch_id // 3.
  block_ = branch_id / 3;
  layer_ = branch_id % 3;
}

int64_t DeepCache::entry_layer(int64_t up_layers) const {
  // is_skip_step for an up block's resnets[j] and attentions[j]: layer_i = up_layers - 1 - j is skipped when
  // layer_i > cache_layer_id, so the layers j >= up_layers - 1 - layer run.
  return std::max<int64_t>(0, up_layers - 1 - layer_);
}

void DeepCache::next_call(const at::Tensor& timesteps, int64_t index, int64_t images) {
  // wrap_unet_forward: cur_timestep = list(scheduler.timesteps).index(t), the first entry equal to t.
  const at::Tensor all = timesteps.to(at::kCPU, at::kDouble).contiguous();  // exact for float32 and int64 timesteps
  const double* t = all.data_ptr<double>();
  if (index < 0 || index >= all.numel()) throw Error("DeepCache: step index out of the schedule");
  int64_t position = 0;
  while (t[position] != t[index]) ++position;
  // is_skip_step: start_timestep is the first call's position; a call is full when
  // (cur_timestep - start_timestep) % cache_interval == 0 (Python's %, never negative).
  if (start_ < 0) start_ = position;
  const int64_t offset = ((position - start_) % interval_ + interval_) % interval_;
  full_ = offset == 0;
  calls_ += images;
  if (!full_) shallow_ += images;
}

void DeepCache::count_into(nlohmann::json& statistics) const {
  statistics["denoiser_calls"] = statistics.value("denoiser_calls", int64_t{0}) + calls_;
  statistics["denoiser_calls_cached"] = statistics.value("denoiser_calls_cached", int64_t{0}) + shallow_;
  statistics["step_cache"] = "DeepCache";
  statistics["step_cache_skip"] = "ran only the shallow branch";
}

}  // namespace dpinfer::pipeline

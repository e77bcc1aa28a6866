#include "dpinfer/worker/devices.h"

#include <torch/cuda.h>

#include "dpinfer/util/error.h"

namespace dpinfer::worker {

std::string resolve_device(const std::string& requested, const plan::RankInfo& rank) {
  const int visible = static_cast<int>(torch::cuda::device_count());
  if (requested == "cpu") return "cpu";
  if (requested == "auto" && visible == 0) return "cpu";
  if (visible == 0)
    throw UsageError("--device cuda: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver, or use "
                     "--device cpu)");
  // `srun --gpus-per-task=1`: SLURM shows each task its own GPU, whatever its local rank.
  if (visible == 1 && rank.source == "slurm") return "cuda:0";
  if (rank.local_rank >= visible)
    throw UsageError("rank " + std::to_string(rank.rank) + " needs cuda:" + std::to_string(rank.local_rank) + " but " +
                     std::to_string(visible) + " device(s) are visible (start at most " + std::to_string(visible) +
                     " processes per node)");
  return "cuda:" + std::to_string(rank.local_rank);
}

std::string resolve_dtype(const std::string& requested, const std::string& device) {
  if (requested != "auto") return requested;
  return device == "cpu" ? "fp32" : "fp16";
}

}  // namespace dpinfer::worker

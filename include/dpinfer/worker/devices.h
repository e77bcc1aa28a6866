#pragma once
// Which device and dtype a rank runs on, from --device and --dtype.

#include <string>

#include "dpinfer/plan/rank_info.h"

namespace dpinfer::worker {

/// "cpu" or "cuda:N" for `requested` (auto, cuda or cpu): cuda:LOCAL_RANK when CUDA is
/// visible, or cuda:0 under `srun --gpus-per-task=1`, which shows each task its own GPU.
/// Throws UsageError when CUDA is asked for and missing, or the local rank has no GPU.
std::string resolve_device(const std::string& requested, const plan::RankInfo& rank);

/// `requested` (auto, fp32, fp16, bf16), with auto as fp16 on CUDA and fp32 on the CPU.
std::string resolve_dtype(const std::string& requested, const std::string& device);

}  // namespace dpinfer::worker

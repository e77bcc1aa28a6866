#include "dpinfer/pipeline/loading/fp8_compute.h"

#include <torch/nn/module.h>

#ifdef DPINFER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/offload.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

/// InputError unless `mode` is a mode that computes in float8.
void require_fp8_mode(const std::string& mode) {
  if (mode != "tensorwise" && mode != "rowwise")
    throw InputError("--fp8-compute: expected off, tensorwise or rowwise, got " + quote(mode, 60));
}

}  // namespace

std::vector<std::string> compute_blocks_in_fp8(torch::nn::Module& module, const std::string& component,
                                               const std::string& mode) {
  require_fp8_mode(mode);
  const auto* blocks = dynamic_cast<const nn::OffloadableBlocks*>(&module);
  if (!blocks)
    throw InputError("--fp8-compute " + mode + ": the " + component + " has no transformer blocks (a UNet); fp8 " +
                     "compute is for the DiT families (FLUX.1, FLUX.2, Chroma, SD3, Qwen-Image, Z-Image); drop " +
                     "--fp8-compute for this model");
  std::vector<std::string> changed;
  for (const std::string& list : blocks->block_lists()) {
    const std::string prefix = list + ".";
    for (const auto& item : module.named_modules("", /*include_self=*/false)) {
      if (item.key().rfind(prefix, 0) != 0) continue;
      auto* linear = dynamic_cast<nn::LinearImpl*>(item.value().get());
      if (!linear || linear->weight.size(0) % 16 != 0 || linear->weight.size(1) % 16 != 0) continue;
      linear->compute_in_fp8(mode == "rowwise");
      changed.push_back(item.key());
    }
  }
  return changed;
}

void check_fp8_compute(const std::string& mode, const std::string& device, const std::string& dtype) {
  if (mode == "off") return;
  require_fp8_mode(mode);
  if (mode == "rowwise" && device == "cpu")
    throw InputError("--fp8-compute rowwise: LibTorch's CPU _scaled_mm takes one scale per tensor only; use "
                     "--fp8-compute tensorwise on the CPU, or a CUDA device");
  if (mode == "rowwise" && dtype != "bf16")
    throw InputError("--fp8-compute rowwise: the per-row float8 product takes bf16 weights (as torchao's), and the "
                     "run dtype is " + dtype + "; add --dtype bf16");
#ifdef DPINFER_WITH_CUDA
  if (device.rfind("cuda:", 0) == 0) {
    const int index = std::stoi(device.substr(5));
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) == cudaSuccess &&
        major * 10 + minor < 89)
      throw InputError("--fp8-compute " + mode + ": " + device + " has compute capability " + std::to_string(major) +
                       "." + std::to_string(minor) + ", and float8 products need 8.9 or newer (Ada, Hopper); drop "
                       "--fp8-compute on this GPU");
  }
#endif
}

}  // namespace dpinfer::pipeline

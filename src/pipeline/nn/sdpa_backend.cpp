#include "dpinfer/pipeline/nn/sdpa_backend.h"

#include <ATen/Context.h>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline::nn {

SdpaBackend parse_sdpa_backend(const std::string& name) {
  if (name == "auto") return SdpaBackend::kAuto;
  if (name == "flash") return SdpaBackend::kFlash;
  if (name == "efficient") return SdpaBackend::kEfficient;
  if (name == "cudnn") return SdpaBackend::kCudnn;
  if (name == "math") return SdpaBackend::kMath;
  throw InputError("--attention-backend: expected auto, flash, efficient, cudnn or math, got " + quote(name, 60));
}

const char* sdpa_backend_name(SdpaBackend backend) {
  switch (backend) {
    case SdpaBackend::kAuto: return "auto";
    case SdpaBackend::kFlash: return "flash";
    case SdpaBackend::kEfficient: return "efficient";
    case SdpaBackend::kCudnn: return "cudnn";
    case SdpaBackend::kMath: return "math";
  }
  return "auto";
}

void check_sdpa_backend(SdpaBackend backend, const std::string& device, c10::ScalarType dtype) {
  const bool cpu = device == "cpu";
  if (cpu && (backend == SdpaBackend::kEfficient || backend == SdpaBackend::kCudnn))
    throw InputError(std::string("--attention-backend ") + sdpa_backend_name(backend) +
                     " needs a CUDA device: on the CPU LibTorch has only the math and flash kernels");
  if (!cpu && backend == SdpaBackend::kFlash && dtype != at::kHalf && dtype != at::kBFloat16)
    throw InputError("--attention-backend flash on CUDA takes fp16 or bf16 only (FlashAttention-2); give --dtype "
                     "fp16 or bf16, or another backend");
}

// Ref: torch/nn/attention/__init__.py _sdpa_kernel: every backend's switch set to whether it is the
// chosen one (torch._C._set_sdp_use_{cudnn,flash,mem_efficient,math,overrideable}); sdpa_kernel's
// context manager restores the previous switches on exit.
SdpaBackendScope::SdpaBackendScope(SdpaBackend backend) {
  if (backend == SdpaBackend::kAuto) return;
  at::Context& ctx = at::globalContext();
  flash_ = ctx.userEnabledFlashSDP();
  efficient_ = ctx.userEnabledMemEfficientSDP();
  cudnn_ = ctx.userEnabledCuDNNSDP();
  math_ = ctx.userEnabledMathSDP();
  overrideable_ = ctx.userEnabledOverrideableSDP();
  active_ = true;
  ctx.setSDPUseFlash(backend == SdpaBackend::kFlash);
  ctx.setSDPUseMemEfficient(backend == SdpaBackend::kEfficient);
  ctx.setSDPUseCuDNN(backend == SdpaBackend::kCudnn);
  ctx.setSDPUseMath(backend == SdpaBackend::kMath);
  ctx.setSDPUseOverrideable(false);
}

SdpaBackendScope::~SdpaBackendScope() {
  if (!active_) return;
  at::Context& ctx = at::globalContext();
  ctx.setSDPUseFlash(flash_);
  ctx.setSDPUseMemEfficient(efficient_);
  ctx.setSDPUseCuDNN(cudnn_);
  ctx.setSDPUseMath(math_);
  ctx.setSDPUseOverrideable(overrideable_);
}

}  // namespace dpinfer::pipeline::nn

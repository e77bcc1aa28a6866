#pragma once
// --attention-backend (issue 28 item 3): which of LibTorch's scaled_dot_product_attention kernels a run
// may use, as torch.nn.attention.sdpa_kernel(backend) restricts them. SDPA picks its kernel per call
// from at::globalContext()'s switches (ATen/Context.h setSDPUseFlash and the others; sdp_utils.cpp
// select_sdp_backend on CUDA, sdp_utils_cpp.cpp select_sdp_backend_cpp on the CPU), so the restriction
// holds for every attention of the process, the text encoders' included, while a scope lives.
//
// On the CPU LibTorch has two kernels: math (the unfused composite) and flash (the CPU flash-attention
// kernel, at::_scaled_dot_product_flash_attention_for_cpu). "auto" there takes flash where its checks
// pass, else math. On CUDA: flash (FlashAttention-2, fp16/bf16 only), efficient (memory-efficient,
// xFormers'), cudnn (cuDNN's fused attention) and math; "auto" takes the first that fits in
// at::globalContext().sDPPriorityOrder(). efficient and cudnn are CUDA-only.

#include <memory>
#include <string>

#include <c10/core/ScalarType.h>

namespace dpinfer::pipeline::nn {

enum class SdpaBackend { kAuto, kFlash, kEfficient, kCudnn, kMath };

/// "auto", "flash", "efficient", "cudnn" or "math"; throws InputError for anything else.
SdpaBackend parse_sdpa_backend(const std::string& name);
const char* sdpa_backend_name(SdpaBackend backend);

/// Throws InputError (one line, exit 2) for a backend that `device` ("cpu", "cuda:N") cannot run
/// at all in `dtype`: efficient or cudnn on the CPU; flash on CUDA in float32 (FlashAttention-2
/// takes fp16 and bf16 only: sdp_utils.cpp check_flash_attention_datatype). Whether the GPU has the
/// kernel (its architecture, the LibTorch build) only the first attention call finds out.
void check_sdpa_backend(SdpaBackend backend, const std::string& device, c10::ScalarType dtype);

/// While it lives, SDPA may use only `backend` (nothing changes for kAuto); the switches as they were
/// come back when it ends, as sdpa_kernel's context manager restores them on exit.
class SdpaBackendScope {
 public:
  explicit SdpaBackendScope(SdpaBackend backend);
  ~SdpaBackendScope();
  SdpaBackendScope(const SdpaBackendScope&) = delete;
  SdpaBackendScope& operator=(const SdpaBackendScope&) = delete;

 private:
  bool active_ = false;
  bool flash_ = true, efficient_ = true, cudnn_ = true, math_ = true, overrideable_ = true;
};

}  // namespace dpinfer::pipeline::nn

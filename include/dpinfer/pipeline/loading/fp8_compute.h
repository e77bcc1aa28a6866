#pragma once
// --fp8-compute (issue 28, the GPU levers): the Linear layers of a DiT denoiser's blocks multiply in
// float8_e4m3fn with torch._scaled_mm, as torchao 0.15's
//   quantize_(transformer, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor() or PerRow()),
//             filter_fn=<a Linear under one of the transformer's block lists>)
// makes them compute (nn::LinearImpl::compute_in_fp8 has the arithmetic). On Hopper and Ada GPUs the float8
// tensor cores run such a product about twice as fast as bf16; the blocks' weights take half the memory.

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// Makes the Linear layers under `module`'s block lists (nn::OffloadableBlocks::block_lists(): FLUX.1's
/// transformer_blocks and single_transformer_blocks, Z-Image's refiners and layers, ...) compute in float8,
/// `mode` "tensorwise" or "rowwise", after their weights are loaded. A layer whose in or out features are no
/// multiple of 16 keeps the run dtype, as torchao leaves it (quantization/quant_api.py _fp8_mm_compat: _scaled_mm's
/// shape rule). Returns the dotted names of the layers changed. InputError, naming `component`, for a module
/// without block lists (a UNet) or a mode that is neither.
std::vector<std::string> compute_blocks_in_fp8(torch::nn::Module& module, const std::string& component,
                                               const std::string& mode);

/// Refuses (InputError, one line) --fp8-compute `mode` where it cannot run: "rowwise" on the CPU (LibTorch's CPU
/// _scaled_mm takes one scale per tensor only) or in another dtype than bf16 (torchao's per-row float8 takes bf16
/// weights only); either mode on a CUDA device below compute capability 8.9 (no float8 tensor cores, where
/// _scaled_mm refuses). `device` "cpu" or "cuda:N", `dtype` "fp32", "fp16" or "bf16". "off" passes.
void check_fp8_compute(const std::string& mode, const std::string& device, const std::string& dtype);

}  // namespace dpinfer::pipeline

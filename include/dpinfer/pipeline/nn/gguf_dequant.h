#pragma once
// GGUF's quantized blocks back to values, by the very tensor operations of diffusers 0.36's
// quantizers/gguf/utils.py dequantize_gguf_tensor (City96's torch port of ggml's dequantizers), in
// the same order and dtypes, so that the values are bit for bit diffusers' on the CPU: the Q types
// compute in float16 (the dtype of their fp16 block scales; diffusers passes no dtype), BF16 and the
// IQ4 types in float32. The caller casts the result to the compute dtype, as GGUFLinear.forward_native does.

#include <ATen/ATen.h>

#include "dpinfer/io/gguf_file.h"

namespace dpinfer::pipeline::nn {

/// Whether dequantize_gguf() reads `type`: those diffusers 0.36 dequantizes, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and BF16.
bool gguf_dequantizable(io::GgmlType type);

/// The values of `blocks`, a uint8 tensor [..., row_bytes] of whole blocks of `type` (the bytes of a
/// GGUF tensor as diffusers' GGUFParameter holds them), as [..., row_bytes / type_size * block_size]:
/// float16 for the Q types, float32 for BF16, IQ4_NL and IQ4_XS (their levels are float32), on blocks' device. Throws dpinfer::Error for a type
/// gguf_dequantizable() refuses or bytes that are not whole blocks.
at::Tensor dequantize_gguf(const at::Tensor& blocks, io::GgmlType type);

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/gguf_dequant.h"

#include <string>
#include <vector>

#include "dpinfer/util/error.h"

// Each function below is the tensor program of its namesake in diffusers 0.36
// quantizers/gguf/utils.py, operation for operation: a uint8 split, reshape, shift or mask is
// exact whatever the order, but the float16 products and sums round at each step, so they are
// taken in diffusers' order and with its operand dtypes (int8 or uint8 times float16 is float16).
// `blocks` is [n, type_size] uint8; every result is [n, block_size].
namespace dpinfer::pipeline::nn {
namespace {

constexpr int64_t kQK_K = 256;       // QK_K
constexpr int64_t kKScaleSize = 12;  // K_SCALE_SIZE

/// torch.tensor(values, dtype=torch.uint8) on `like`'s device.
at::Tensor u8(std::vector<int64_t> values, const at::Tensor& like) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(like.device(), at::kByte);
}

/// split_block_dims(blocks, *sizes): the column groups of `blocks` of these sizes, then the rest.
std::vector<at::Tensor> split_block_dims(const at::Tensor& blocks, std::vector<int64_t> sizes) {
  int64_t used = 0;
  for (int64_t s : sizes) used += s;
  sizes.push_back(blocks.size(1) - used);
  return at::split_with_sizes(blocks, sizes, /*dim=*/1);
}

/// to_uint32: four bytes a row as one little-endian int32, [n, 1].
at::Tensor to_uint32(const at::Tensor& x8) {
  const at::Tensor x = x8.view(at::kByte).to(at::kInt);
  return (x.select(1, 0) | x.select(1, 1).__lshift__(8) | x.select(1, 2).__lshift__(16) |
          x.select(1, 3).__lshift__(24))
      .unsqueeze(1);
}

/// get_scale_min: the 6-bit scales and mins of Q4_K and Q5_K packed in 12 bytes, each [n, 8] uint8.
std::pair<at::Tensor, at::Tensor> get_scale_min(const at::Tensor& scales_in) {
  const int64_t n = scales_in.size(0);
  const at::Tensor scales = scales_in.view(at::kByte).reshape({n, 3, 4});
  const auto parts = at::split(scales, scales.size(-2) / 3, /*dim=*/-2);
  const at::Tensor &d = parts[0], &m = parts[1], &m_d = parts[2];
  const at::Tensor sc = at::cat({d & 0x3F, (m_d & 0x0F) | (d.__rshift__(2) & 0x30)}, -1);
  const at::Tensor min = at::cat({m & 0x3F, m_d.__rshift__(4) | (m.__rshift__(2) & 0x30)}, -1);
  return {sc.reshape({n, 8}), min.reshape({n, 8})};
}

// Ref: dequantize_blocks_Q8_0
at::Tensor q8_0(const at::Tensor& blocks, int64_t) {
  const auto p = split_block_dims(blocks, {2});
  const at::Tensor d = p[0].view(at::kHalf);
  const at::Tensor x = p[1].view(at::kChar);
  return d * x;
}

// Ref: dequantize_blocks_Q5_1
at::Tensor q5_1(const at::Tensor& blocks, int64_t block_size) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2, 2, 4});
  const at::Tensor d = p[0].view(at::kHalf);
  const at::Tensor m = p[1].view(at::kHalf);
  at::Tensor qh = to_uint32(p[2]);
  qh = qh.reshape({n, 1}).__rshift__(at::arange(32, at::TensorOptions().dtype(at::kInt).device(d.device())).reshape({1, 32}));
  at::Tensor ql = p[3].reshape({n, -1, 1, block_size / 2}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qh = (qh & 1).to(at::kByte);
  ql = (ql & 0x0F).reshape({n, -1});
  const at::Tensor qs = ql | qh.__lshift__(4);
  return (d * qs) + m;
}

// Ref: dequantize_blocks_Q5_0
at::Tensor q5_0(const at::Tensor& blocks, int64_t block_size) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2, 4});
  const at::Tensor d = p[0].view(at::kHalf);
  at::Tensor qh = to_uint32(p[1]);
  qh = qh.reshape({n, 1}).__rshift__(at::arange(32, at::TensorOptions().dtype(at::kInt).device(d.device())).reshape({1, 32}));
  at::Tensor ql = p[2].reshape({n, -1, 1, block_size / 2}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qh = (qh & 1).to(at::kByte);
  ql = (ql & 0x0F).reshape({n, -1});
  const at::Tensor qs = (ql | qh.__lshift__(4)).to(at::kChar) - 16;
  return d * qs;
}

// Ref: dequantize_blocks_Q4_1
at::Tensor q4_1(const at::Tensor& blocks, int64_t block_size) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2, 2});
  const at::Tensor d = p[0].view(at::kHalf);
  const at::Tensor m = p[1].view(at::kHalf);
  at::Tensor qs = p[2].reshape({n, -1, 1, block_size / 2}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qs = (qs & 0x0F).reshape({n, -1});
  return (d * qs) + m;
}

// Ref: dequantize_blocks_Q4_0
at::Tensor q4_0(const at::Tensor& blocks, int64_t block_size) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2});
  const at::Tensor d = p[0].view(at::kHalf);
  at::Tensor qs = p[1].reshape({n, -1, 1, block_size / 2}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qs = (qs & 0x0F).reshape({n, -1}).to(at::kChar) - 8;
  return d * qs;
}

// Ref: dequantize_blocks_Q6_K
at::Tensor q6_k(const at::Tensor& blocks, int64_t) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {kQK_K / 2, kQK_K / 4, kQK_K / 16});
  const at::Tensor scales = p[2].view(at::kChar);
  at::Tensor d = p[3].view(at::kHalf);
  d = (d * scales).reshape({n, kQK_K / 16, 1});
  at::Tensor ql = p[0].reshape({n, -1, 1, 64}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  ql = (ql & 0x0F).reshape({n, -1, 32});
  at::Tensor qh = p[1].reshape({n, -1, 1, 32}).__rshift__(u8({0, 2, 4, 6}, d).reshape({1, 1, 4, 1}));
  qh = (qh & 0x03).reshape({n, -1, 32});
  at::Tensor q = (ql | qh.__lshift__(4)).to(at::kChar) - 32;
  q = q.reshape({n, kQK_K / 16, -1});
  return (d * q).reshape({n, kQK_K});
}

// Ref: dequantize_blocks_Q5_K
at::Tensor q5_k(const at::Tensor& blocks, int64_t) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2, 2, kKScaleSize, kQK_K / 8});
  at::Tensor d = p[0].view(at::kHalf);
  const at::Tensor dmin = p[1].view(at::kHalf);
  const auto [sc, m] = get_scale_min(p[2]);
  d = (d * sc).reshape({n, -1, 1});
  const at::Tensor dm = (dmin * m).reshape({n, -1, 1});
  at::Tensor ql = p[4].reshape({n, -1, 1, 32}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  at::Tensor qh = p[3].reshape({n, -1, 1, 32}).__rshift__(
      at::arange(0, 8, at::TensorOptions().dtype(at::kByte).device(d.device())).reshape({1, 1, 8, 1}));
  ql = (ql & 0x0F).reshape({n, -1, 32});
  qh = (qh & 0x01).reshape({n, -1, 32});
  const at::Tensor q = ql | qh.__lshift__(4);
  return (d * q - dm).reshape({n, kQK_K});
}

// Ref: dequantize_blocks_Q4_K
at::Tensor q4_k(const at::Tensor& blocks, int64_t) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2, 2, kKScaleSize});
  at::Tensor d = p[0].view(at::kHalf);
  const at::Tensor dmin = p[1].view(at::kHalf);
  const auto [sc, m] = get_scale_min(p[2]);
  d = (d * sc).reshape({n, -1, 1});
  const at::Tensor dm = (dmin * m).reshape({n, -1, 1});
  at::Tensor qs = p[3].reshape({n, -1, 1, 32}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qs = (qs & 0x0F).reshape({n, -1, 32});
  return (d * qs - dm).reshape({n, kQK_K});
}

// Ref: dequantize_blocks_Q3_K
at::Tensor q3_k(const at::Tensor& blocks, int64_t) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {kQK_K / 8, kQK_K / 4, 12});
  const at::Tensor& hmask = p[0];
  const at::Tensor& qs = p[1];
  const at::Tensor& scales_in = p[2];
  const at::Tensor d = p[3].view(at::kHalf);
  at::Tensor lscales = scales_in.slice(1, 0, 8), hscales = scales_in.slice(1, 8);
  lscales = lscales.reshape({n, 1, 8}).__rshift__(u8({0, 4}, d).reshape({1, 2, 1}));
  lscales = lscales.reshape({n, 16});
  hscales = hscales.reshape({n, 1, 4}).__rshift__(u8({0, 2, 4, 6}, d).reshape({1, 4, 1}));
  hscales = hscales.reshape({n, 16});
  at::Tensor scales = (lscales & 0x0F) | ((hscales & 0x03).__lshift__(4));
  scales = scales.to(at::kChar) - 32;
  const at::Tensor dl = (d * scales).reshape({n, 16, 1});
  at::Tensor ql = qs.reshape({n, -1, 1, 32}).__rshift__(u8({0, 2, 4, 6}, d).reshape({1, 1, 4, 1}));
  at::Tensor qh = hmask.reshape({n, -1, 1, 32}).__rshift__(
      at::arange(0, 8, at::TensorOptions().dtype(at::kByte).device(d.device())).reshape({1, 1, 8, 1}));
  ql = ql.reshape({n, 16, kQK_K / 16}) & 3;
  qh = (qh.reshape({n, 16, kQK_K / 16}) & 1) ^ 1;
  const at::Tensor q = ql.to(at::kChar) - qh.__lshift__(2).to(at::kChar);
  return (dl * q).reshape({n, kQK_K});
}

// Ref: dequantize_blocks_Q2_K
at::Tensor q2_k(const at::Tensor& blocks, int64_t) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {kQK_K / 16, kQK_K / 4, 2});
  const at::Tensor& scales = p[0];
  const at::Tensor d = p[2].view(at::kHalf);
  const at::Tensor dmin = p[3].view(at::kHalf);
  const at::Tensor dl = (d * (scales & 0xF)).reshape({n, kQK_K / 16, 1});       // [n, 16, 1]
  const at::Tensor ml = (dmin * scales.__rshift__(4)).reshape({n, kQK_K / 16, 1});
  const at::Tensor shift = u8({0, 2, 4, 6}, d).reshape({1, 1, 4, 1});
  at::Tensor qs = p[1].reshape({n, -1, 1, 32}).__rshift__(shift) & 3;
  qs = qs.reshape({n, kQK_K / 16, 16});
  qs = dl * qs - ml;
  return qs.reshape({n, -1});
}

// Ref: dequantize_blocks_BF16: the 16 bits as the high half of a float32.
at::Tensor bf16(const at::Tensor& blocks, int64_t) {
  return blocks.view(at::kShort).to(at::kInt).__lshift__(16).view(at::kFloat);
}

/// The 16 non-linear levels of IQ4_NL and IQ4_XS (kvalues), float32 on `like`'s device.
at::Tensor iq4_levels(const at::Tensor& like) {
  return at::tensor(std::vector<float>{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113},
                    at::TensorOptions().dtype(at::kFloat))
      .to(like.device());
}

// Ref: dequantize_blocks_IQ4_NL. The levels are float32, so the product is float32 (fp16 [n, 1] times
// float32 [n, 32]).
at::Tensor iq4_nl(const at::Tensor& blocks, int64_t block_size) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2});
  const at::Tensor d = p[0].view(at::kHalf);
  at::Tensor qs = p[1].reshape({n, -1, 1, block_size / 2}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qs = (qs & 15).reshape({n, -1}).to(at::kLong).unsqueeze(-1);  // [n, 32, 1]
  const at::Tensor levels = iq4_levels(d).view({1, 1, 16});
  qs = at::gather(levels.expand({qs.size(0), qs.size(1), 16}), 2, qs).squeeze(-1);
  return d * qs;
}

// Ref: dequantize_blocks_IQ4_XS: eight 6-bit sub-block scales (low 4 bits in scales_l, high 2 in the int16
// scales_h), minus 32, times the fp16 d, times the levels of each 4-bit value.
at::Tensor iq4_xs(const at::Tensor& blocks, int64_t) {
  const int64_t n = blocks.size(0);
  const auto p = split_block_dims(blocks, {2, 2, kQK_K / 64});
  const at::Tensor d = p[0].view(at::kHalf);
  at::Tensor scales_h = p[1].view(at::kShort);
  at::Tensor scales_l = p[2].reshape({n, -1, 1}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2}));
  scales_h = scales_h.reshape({n, 1, -1}).__rshift__(u8({0, 2, 4, 6, 8, 10, 12, 14}, d).reshape({1, -1, 1}));
  scales_l = scales_l.reshape({n, -1}) & 0x0F;
  scales_h = scales_h.reshape({n, -1}) & 0x03;
  const at::Tensor scales = (scales_l | scales_h.__lshift__(4)) - 32;
  const at::Tensor dl = (d * scales).reshape({n, -1, 1});
  at::Tensor qs = p[3].reshape({n, -1, 1, 16}).__rshift__(u8({0, 4}, d).reshape({1, 1, 2, 1}));
  qs = (qs & 15).reshape({n, -1, 32}).to(at::kLong).unsqueeze(-1);  // [n, 8, 32, 1]
  const at::Tensor levels = iq4_levels(d).view({1, 1, 1, 16});
  qs = at::gather(levels.expand({qs.size(0), qs.size(1), qs.size(2), 16}), 3, qs).squeeze(-1);
  return (dl * qs).reshape({n, -1});
}

using Dequantizer = at::Tensor (*)(const at::Tensor&, int64_t);

Dequantizer dequantizer(io::GgmlType type) {
  switch (type) {
    case io::GgmlType::kQ8_0: return q8_0;
    case io::GgmlType::kQ5_1: return q5_1;
    case io::GgmlType::kQ5_0: return q5_0;
    case io::GgmlType::kQ4_1: return q4_1;
    case io::GgmlType::kQ4_0: return q4_0;
    case io::GgmlType::kQ6_K: return q6_k;
    case io::GgmlType::kQ5_K: return q5_k;
    case io::GgmlType::kQ4_K: return q4_k;
    case io::GgmlType::kQ3_K: return q3_k;
    case io::GgmlType::kQ2_K: return q2_k;
    case io::GgmlType::kBF16: return bf16;
    case io::GgmlType::kIQ4_NL: return iq4_nl;
    case io::GgmlType::kIQ4_XS: return iq4_xs;
    default: return nullptr;
  }
}

}  // namespace

bool gguf_dequantizable(io::GgmlType type) { return dequantizer(type) != nullptr; }

// Ref: dequantize_gguf_tensor: the bytes as [n_blocks, type_size], each block dequantized, the
// result reshaped to the logical shape (_quant_shape_from_byte_shape).
at::Tensor dequantize_gguf(const at::Tensor& blocks, io::GgmlType type) {
  const Dequantizer fn = dequantizer(type);
  if (!fn) throw Error("ggml type " + std::string(io::ggml_type_name(type)) + " cannot be dequantized by dpinfer");
  const int64_t block_size = io::ggml_block_size(type), type_size = io::ggml_type_size(type);
  const at::Tensor bytes = blocks.view(at::kByte);
  if (bytes.dim() == 0 || bytes.size(-1) % type_size != 0)
    throw Error("internal: a " + std::string(io::ggml_type_name(type)) + " tensor whose rows are not whole blocks");
  std::vector<int64_t> shape(bytes.sizes().begin(), bytes.sizes().end());
  shape.back() = shape.back() / type_size * block_size;
  const int64_t n_blocks = bytes.numel() / type_size;
  return fn(bytes.reshape({n_blocks, type_size}), block_size).reshape(shape);
}

}  // namespace dpinfer::pipeline::nn

// dpinfer's GGUF dequantizers against diffusers 0.36's dequantize_gguf_tensor on the same blocks
// (tests/data/gguf/dequant.{gguf,safetensors}, tools/fixtures/make_gguf_fixtures.py): every type
// diffusers dequantizes and dpinfer supports, bit for bit.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstring>
#include <set>
#include <string>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/nn/gguf_dequant.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = std::string(DPINFER_TEST_DATA_DIR) + "/gguf/";

/// The bytes of `t` as diffusers' GGUFParameter holds them: uint8 [..., row bytes].
at::Tensor blocks_of(const io::GgufTensor& t) {
  at::Tensor out = at::empty(t.byte_shape(), at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), t.data, t.nbytes);
  return out;
}

at::Tensor golden_of(const io::TensorView& v) {
  const at::ScalarType dtype = v.dtype == io::Dtype::kF16 ? at::kHalf : at::kFloat;  // F16 or F32
  at::Tensor out = at::empty(v.shape, at::TensorOptions().dtype(dtype));
  std::memcpy(out.data_ptr(), v.data, v.nbytes);
  return out;
}

TEST(GgufDequant, MatchesDiffusersBitForBit) {
  const auto file = io::GgufFile::open(kData + "dequant.gguf");
  const auto golden = io::SafetensorsFile::open(kData + "dequant.safetensors");
  std::set<std::string> seen;
  for (const io::GgufTensor& t : file->tensors()) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(gguf_dequantizable(t.type));
    const io::TensorView* expected = golden->find(t.name);
    ASSERT_NE(expected, nullptr);
    const at::Tensor want = golden_of(*expected);
    const at::Tensor got = dequantize_gguf(blocks_of(t), t.type);
    ASSERT_EQ(got.scalar_type(), want.scalar_type());
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(at::equal(got, want)) << "max |diff| " << (got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<float>();
    seen.insert(t.name);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "Q2_K", "Q3_K", "Q4_K",
                                         "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "Q4_K_quantized"}));
}

TEST(GgufDequant, RefusesTypesDiffusersCannotDequantize) {
  EXPECT_FALSE(gguf_dequantizable(io::GgmlType::kQ8_1));
  EXPECT_FALSE(gguf_dequantizable(io::GgmlType::kF32));
  EXPECT_THROW(dequantize_gguf(at::zeros({1, 40}, at::kByte), io::GgmlType::kQ8_1), Error);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline::nn

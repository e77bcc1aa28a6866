// fp8 checkpoints through dpinfer's normal loader: tiny-sd1's CLIP text encoder saved in
// F8_E4M3, F8_E5M2 and ComfyUI-style scaled F8_E4M3 (tools/fixtures/make_fp8_fixtures.py),
// loaded into float32 and run on tiny-sd1's golden token ids, against torch's float32 model
// with the same upcast (and, for the scaled file, fp8.to(float32) * scale) weights.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

void expect_matches_torch(const std::string& name) {
  const at::Tensor out = test::clip_last_hidden_state(name);
  test::GoldenFile golden(test::model_fixture_dir("tiny-sd1-te-fp8.golden") + "/text_encoder.safetensors");
  const at::Tensor expected = golden[name + ".last_hidden_state"];
  // The weights are bit-identical to torch's (fp8 -> float32 is exact, and the scale is one
  // float32 multiply as in torch); the forward is test_clip_text_model.cpp's, which matches
  // transformers within the parity bound, and bit for bit on the CPU that recorded the golden.
  // (tiny-sd1-te-e4m3 is also fixture_cpu.h's canary, so its bit check holds by definition
  // there; a wrong fp8 decode is off by far more than the parity bound.)
  test::expect_close(out, expected, name + " last_hidden_state");
  test::expect_bit_identical_on_recording_cpu(out, expected, name + " last_hidden_state");
}

TEST(Fp8Weights, F8E4M3TextEncoderMatchesTorch) { expect_matches_torch("tiny-sd1-te-e4m3"); }
TEST(Fp8Weights, F8E5M2TextEncoderMatchesTorch) { expect_matches_torch("tiny-sd1-te-e5m2"); }
TEST(Fp8Weights, ScaledF8E4M3TextEncoderMatchesTorch) { expect_matches_torch("tiny-sd1-te-scaled-e4m3"); }

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

#include "torch/fixture_cpu.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "torch/model_goldens.h"

namespace dpinfer::test {
namespace {

const std::string kFp8Golden = "tiny-sd1-te-fp8.golden";

}  // namespace

at::Tensor clip_last_hidden_state(const std::string& fixture) {
  c10::InferenceMode guard;
  const std::string dir = model_fixture_dir(fixture);
  pipeline::CLIPTextModel model(pipeline::CLIPTextConfig::from_file(dir + "/config.json"));
  pipeline::load_weights(*model, pipeline::find_weight_files(dir, "").files,
                         pipeline::find_model_class("CLIPTextModel")->renames, "text_encoder");
  model->eval();
  GoldenFile golden(model_fixture_dir(kFp8Golden) + "/text_encoder.safetensors");
  return model->forward(golden["text.input_ids"]).last_hidden_state.contiguous();
}

at::Tensor cpu_canary() { return cpu_canary(at::kFloat); }

at::Tensor cpu_canary(at::ScalarType dtype) {
  static std::mutex mutex;
  static std::map<at::ScalarType, at::Tensor> canaries;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = canaries.find(dtype);
  if (it != canaries.end()) return it->second;
  c10::InferenceMode guard;
  OneThread one;
  // As cpu_canary.py: the F8_E4M3 weights upcast into the model (exact in float32, bf16 and fp16),
  // the model in `dtype`, tiny-sd1-te-fp8.golden's token ids.
  const std::string dir = model_fixture_dir("tiny-sd1-te-e4m3");
  pipeline::CLIPTextModel model(pipeline::CLIPTextConfig::from_file(dir + "/config.json"),
                                at::TensorOptions().dtype(dtype));
  pipeline::load_weights(*model, pipeline::find_weight_files(dir, "").files,
                         pipeline::find_model_class("CLIPTextModel")->renames, "text_encoder");
  model->eval();
  GoldenFile golden(model_fixture_dir(kFp8Golden) + "/text_encoder.safetensors");
  at::Tensor t = model->forward(golden["text.input_ids"]).last_hidden_state.contiguous();
  return canaries[dtype] = t;
}

bool recorded_on_this_cpu(const at::Tensor& recorded_canary) {
  if (recorded_canary.defined()) return at::equal(cpu_canary(), recorded_canary);
  static const bool legacy = [] {
    GoldenFile golden(model_fixture_dir(kFp8Golden) + "/text_encoder.safetensors");
    const bool same = at::equal(cpu_canary(), golden["tiny-sd1-te-e4m3.last_hidden_state"]);
    if (!same)
      std::printf("  note: this CPU sums float reductions in another order than the machine that recorded most of "
                  "tests/data (tools/fixtures/cpu_canary.py); bit identity with its goldens is not checked here, "
                  "the parity bounds are\n");
    return same;
  }();
  return legacy;
}

bool half_recorded_on_this_cpu(const std::string& canary_file) {
  static std::mutex mutex;
  static std::map<std::string, bool> answers;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = answers.find(canary_file);
    if (it != answers.end()) return it->second;
  }
  GoldenFile recorded(canary_file);
  std::string differs;
  for (const auto& [key, dtype] : {std::pair{"cpu_canary", at::kFloat}, std::pair{"cpu_canary_bf16", at::kBFloat16},
                                   std::pair{"cpu_canary_fp16", at::kHalf}})
    if (!at::equal(cpu_canary(dtype), recorded[key])) differs += std::string(differs.empty() ? "" : ", ") + key;
  if (!differs.empty())
    std::printf("  note: this CPU computes %s otherwise than the machine that recorded %s (cpu_canary.py): its "
                "half-precision goldens are held to the cross-CPU bound here\n",
                differs.c_str(), canary_file.c_str());
  std::lock_guard<std::mutex> lock(mutex);
  return answers[canary_file] = differs.empty();
}

void expect_bit_identical_on_recording_cpu(const at::Tensor& actual, const at::Tensor& expected,
                                           const std::string& what, const at::Tensor& recorded_canary) {
  if (recorded_on_this_cpu(recorded_canary)) {
    EXPECT_TRUE(at::equal(actual, expected))
        << what << ": not bit-identical, max |diff| "
        << (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
  } else {
    std::printf("  %-58s recorded on another CPU (fixture_cpu.h): parity bound\n", what.c_str());
    expect_close(actual, expected, what);
  }
}

}  // namespace dpinfer::test

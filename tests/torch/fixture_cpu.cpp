#include "torch/fixture_cpu.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
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

at::Tensor cpu_canary() {
  static const at::Tensor canary = [] {
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    at::Tensor t = clip_last_hidden_state("tiny-sd1-te-e4m3");
    at::set_num_threads(threads);
    return t;
  }();
  return canary;
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

bool bf16_as_on_recording_cpu() {
  static const bool same = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream words(line);
      for (std::string w; words >> w;)
        if (w == "avx512_bf16" || w == "amx_bf16") {
          std::printf("  note: this CPU has %s, which oneDNN's bf16 matmuls use and the machine that recorded "
                      "tests/data lacked: bf16 goldens are held to the cross-CPU bound here\n", w.c_str());
          return false;
        }
      break;
    }
    return recorded_on_this_cpu();
  }();
  return same;
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

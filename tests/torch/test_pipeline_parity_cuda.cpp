// The whole pipeline on the GPU against the diffusers goldens (recorded on the CPU in
// fp32 by tools/fixtures/make_pipelines.py): every recorded case of the three tiny
// pipelines, in each dtype, with issue 4's bounds on ‖Δ‖/‖ref‖ over the case's uint8
// images: fp32 <= 1e-3, fp16 and bf16 <= 2e-2. The fp32 case runs twice: with
// LibTorch's defaults, as `dpinfer generate --dtype fp32` runs (cuDNN may use TF32 for
// convolutions), and with TF32 off. Named *_CUDA: only where a GPU is visible
// (torch_main.cpp). Each test prints one "[ parity-cuda ]" line per pipeline, which
// tools/device/gpu_check.sh collects.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/stable_diffusion.h"

using namespace dpinfer;
using nlohmann::json;

namespace {

const std::string kData = DPINFER_TEST_DATA_DIR;

std::vector<std::string> as_list(const json& v, size_t n) {
  if (v.is_null()) return std::vector<std::string>(n, "");
  if (v.is_string()) return std::vector<std::string>(n, v.get<std::string>());
  return v.get<std::vector<std::string>>();
}

/// The case's batch in diffusers' order: prompt-major, one generator (seed) per image.
std::vector<pipeline::ImageRequest> requests_of(const json& c) {
  const json& call = c["call"];
  const auto& seeds = c["generator"]["seeds"];
  const int per_prompt = call["num_images_per_prompt"].get<int>();
  const size_t n_prompts = call["prompt"].is_array() ? call["prompt"].size() : 1;
  auto prompts = as_list(call["prompt"], n_prompts);
  auto negatives = as_list(call["negative_prompt"], n_prompts);
  std::vector<pipeline::ImageRequest> batch;
  for (size_t p = 0; p < n_prompts; ++p)
    for (int j = 0; j < per_prompt; ++j) {
      pipeline::ImageRequest r;
      r.prompt = prompts[p];
      r.negative_prompt = negatives[p];
      r.seed = seeds[batch.size()].get<uint64_t>();
      r.steps = call["num_inference_steps"].get<int>();
      r.guidance_scale = call["guidance_scale"].get<double>();
      r.height = c["resolved_height"].get<int>();
      r.width = c["resolved_width"].get<int>();
      batch.push_back(r);
    }
  return batch;
}

/// Runs every recorded case of every fixture pipeline on cuda:0 in `dtype`, EXPECTs
/// ‖Δ‖/‖ref‖ <= `bound` and finite images for each, and prints the worst per pipeline.
void expect_every_case_within(const std::string& dtype, double bound, const std::string& label) {
  for (const std::string name : {"tiny-sd1", "tiny-sd2v", "tiny-3down"}) {
    std::ifstream in(kData + "/pipelines/" + name + ".golden/cases.json");
    const json doc = json::parse(in);
    auto images = io::SafetensorsFile::open(kData + "/pipelines/" + name + ".golden/images.safetensors");
    std::map<std::string, std::unique_ptr<pipeline::TextToImage>> pipes;
    double worst = 0, worst_exact = 1;
    int worst_abs = 0;
    std::string worst_case;
    for (const json& c : doc["cases"]) {
      const std::string what = name + "/" + c["name"].get<std::string>() + " " + label;
      const json& call = c["call"];
      pipeline::StableDiffusionOptions o;
      o.model = kData + "/pipelines/" + name;
      o.scheduler = c["scheduler"]["is_pipeline_default"].get<bool>() ? "" : c["scheduler"]["name"].get<std::string>();
      o.clip_skip = call["clip_skip"].is_null() ? 0 : call["clip_skip"].get<int>();
      o.guidance_rescale = call["guidance_rescale"].get<double>();
      o.eta = call["eta"].get<double>();
      o.dtype = dtype;
      o.device = "cuda:0";
      const std::string key = o.scheduler + "|" + std::to_string(o.clip_skip) + "|" +
                              std::to_string(o.guidance_rescale) + "|" + std::to_string(o.eta);
      auto& pipe = pipes[key];
      if (!pipe) pipe = pipeline::load_stable_diffusion(o);
      ASSERT_EQ(pipe->info().device, "cuda:0");

      const std::vector<pipeline::RgbImage> got = pipe->generate(requests_of(c));
      const io::TensorView* want = images->find(c["image_tensor"].get<std::string>());
      ASSERT_NE(want, nullptr) << what;
      ASSERT_EQ(static_cast<int64_t>(got.size()), want->shape[0]) << what;
      const auto* ref = reinterpret_cast<const uint8_t*>(want->data);
      double diff2 = 0, ref2 = 0;
      size_t exact = 0, total = 0;
      int max_abs = 0;
      bool finite = true;
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k].height, want->shape[1]) << what;
        ASSERT_EQ(got[k].width, want->shape[2]) << what;
        finite = finite && got[k].finite;
        const size_t n = got[k].pixels.size();
        for (size_t i = 0; i < n; ++i) {
          const double a = got[k].pixels[i], e = ref[k * n + i];
          diff2 += (a - e) * (a - e);
          ref2 += e * e;
          max_abs = std::max(max_abs, static_cast<int>(std::abs(a - e)));
          exact += a == e;
          ++total;
        }
      }
      const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
      EXPECT_TRUE(finite) << what << ": NaN or Inf in the decoded image";
      EXPECT_LE(rel, bound) << what << ": max |delta| " << max_abs;
      if (rel >= worst) worst = rel, worst_case = c["name"].get<std::string>();
      worst_abs = std::max(worst_abs, max_abs);
      worst_exact = std::min(worst_exact, static_cast<double>(exact) / static_cast<double>(total));
    }
    std::printf("[ parity-cuda ] %-24s %-10s %2zu cases: worst rel %.3e (%s), max|delta| %d, worst exact %.2f%%, bound %.0e\n",
                label.c_str(), name.c_str(), doc["cases"].size(), worst, worst_case.c_str(), worst_abs,
                100 * worst_exact, bound);
  }
}

/// Sets cuDNN's TF32 switch for the test's lifetime.
class TF32CuDNN {
 public:
  explicit TF32CuDNN(bool on) : saved_(at::globalContext().allowTF32CuDNN()) { at::globalContext().setAllowTF32CuDNN(on); }
  ~TF32CuDNN() { at::globalContext().setAllowTF32CuDNN(saved_); }

 private:
  bool saved_;
};

TEST(PipelineParityCuda, Fp32AsShippedMatchesDiffusers_CUDA) {
  expect_every_case_within("fp32", 1e-3, std::string("fp32") + (at::globalContext().allowTF32CuDNN() ? " (tf32 conv)" : ""));
}

TEST(PipelineParityCuda, Fp32WithoutTF32MatchesDiffusers_CUDA) {
  TF32CuDNN off(false);
  expect_every_case_within("fp32", 1e-3, "fp32 (no tf32)");
}

TEST(PipelineParityCuda, Fp16MatchesDiffusers_CUDA) { expect_every_case_within("fp16", 2e-2, "fp16"); }

TEST(PipelineParityCuda, Bf16MatchesDiffusers_CUDA) { expect_every_case_within("bf16", 2e-2, "bf16"); }

}  // namespace

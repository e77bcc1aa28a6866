// The whole pipeline on the GPU over the recorded cases of the tiny pipelines (SD, SDXL, Z-Image), with
// issue 4's bounds on ‖Δ‖/‖ref‖ over each case's uint8 images:
// - fp32 against the diffusers goldens (tools/fixtures/make_pipelines.py, CPU, fp32),
//   <= 1e-3, twice: with LibTorch's defaults, as `dpinfer generate --dtype fp32` runs
//   (cuDNN may use TF32 for convolutions), and with TF32 off;
// - fp16 and bf16 against the same pipeline in the same dtype on the CPU, <= 2e-2. Not
//   against the goldens: torch draws a different normal sequence in fp16/bf16 than in
//   fp32 from the same CPU generator (diffusers' randn_tensor draws in the model dtype,
//   and so does dpinfer), so an fp16 image is another sample than the fp32 golden, in
//   diffusers too. Both sides here draw the same fp16/bf16 noise on the CPU. A case
//   subset keeps the CPU side short.
// Named *_CUDA: they run only where a GPU is visible (torch_main.cpp). Each test prints
// one "[ parity-cuda ]" line per pipeline, which tools/device/gpu_check.sh collects.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/load.h"
#include "torch/golden_case.h"

using namespace dpinfer;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;

struct Diff {
  double rel = 0;  ///< ‖got − ref‖ / ‖ref‖ over every uint8 value of the case
  int max_abs = 0;
  double exact = 1;  ///< the fraction of values that are equal
};

Diff compare(const std::vector<pipeline::RgbImage>& got, const uint8_t* ref, const std::string& what) {
  double diff2 = 0, ref2 = 0;
  size_t exact = 0, total = 0;
  Diff d;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(got[k].finite) << what << ": NaN or Inf in decoded image " << k;
    const size_t n = got[k].pixels.size();
    for (size_t i = 0; i < n; ++i) {
      const double a = got[k].pixels[i], e = ref[k * n + i];
      diff2 += (a - e) * (a - e);
      ref2 += e * e;
      d.max_abs = std::max(d.max_abs, static_cast<int>(std::abs(a - e)));
      exact += a == e;
      ++total;
    }
  }
  d.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  d.exact = total ? static_cast<double>(exact) / static_cast<double>(total) : 1;
  return d;
}

/// The pipelines of one fixture, one per scheduler, loaded on first use.
class Pipelines {
 public:
  Pipelines(std::string name, std::string dtype, std::string device, std::string weight_storage = "default")
      : name_(std::move(name)), dtype_(std::move(dtype)), device_(std::move(device)),
        weight_storage_(std::move(weight_storage)) {}

  pipeline::TextToImage& for_case(const json& c) {
    pipeline::LoadRequest o;
    o.model = kData + "/pipelines/" + name_;
    o.scheduler = c["scheduler"]["is_pipeline_default"].get<bool>() ? "" : c["scheduler"]["name"].get<std::string>();
    o.dtype = dtype_;
    o.device = device_;
    o.weight_storage = weight_storage_;
    auto& pipe = pipes_[o.scheduler];
    if (!pipe) pipe = pipeline::load_text_to_image(o);
    return *pipe;
  }

 private:
  std::string name_, dtype_, device_, weight_storage_;
  std::map<std::string, std::unique_ptr<pipeline::TextToImage>> pipes_;
};

const std::vector<std::string>& fixtures() {
  static const std::vector<std::string> names = {"tiny-sd1",      "tiny-sd2v",    "tiny-3down",
                                                     "tiny-sdxl",     "tiny-sdxl-alt", "tiny-z-image",
                                                     "tiny-z-image-alt", "tiny-flux2-klein", "tiny-flux2-klein-base",
                                                     "tiny-flux2-dev"};
  return names;
}

json cases_of(const std::string& name) {
  std::ifstream in(kData + "/pipelines/" + name + ".golden/cases.json");
  return json::parse(in);
}

/// The worst of one pipeline's cases, printed as its "[ parity-cuda ]" line.
struct Worst {
  size_t cases = 0;
  double rel = 0;
  std::string rel_case;
  int max_abs = 0;
  double exact = 1;

  void add(const Diff& d, const std::string& case_name) {
    ++cases;
    if (d.rel >= rel) rel = d.rel, rel_case = case_name;
    max_abs = std::max(max_abs, d.max_abs);
    exact = std::min(exact, d.exact);
  }
  void print(const std::string& label, const std::string& pipeline, const char* against, double bound) const {
    std::printf("[ parity-cuda ] %-17s %-10s %2zu cases vs %-8s worst rel %.3e (%s), max|delta| %d, worst exact %.2f%%, "
                "bound %.0e\n",
                label.c_str(), pipeline.c_str(), cases, against, rel, rel_case.c_str(), max_abs, 100 * exact, bound);
  }
};

/// fp32 on cuda:0 against the diffusers goldens: every recorded case within `bound`.
void expect_goldens_within(double bound, const std::string& label) {
  for (const std::string& name : fixtures()) {
    const json doc = cases_of(name);
    auto images = io::SafetensorsFile::open(kData + "/pipelines/" + name + ".golden/images.safetensors");
    Pipelines cuda(name, "fp32", "cuda:0");
    Worst worst;
    for (const json& c : doc["cases"]) {
      if (c.contains("optional_feature")) continue;  // a call argument dpinfer does not take
      const std::string what = name + "/" + c["name"].get<std::string>() + " " + label;
      pipeline::TextToImage& pipe = cuda.for_case(c);
      ASSERT_EQ(pipe.info().device, "cuda:0");
      const std::vector<pipeline::RgbImage> got = pipe.generate(test::golden_case_requests(c));
      const io::TensorView* want = images->find(c["image_tensor"].get<std::string>());
      ASSERT_NE(want, nullptr) << what;
      ASSERT_EQ(static_cast<int64_t>(got.size()), want->shape[0]) << what;
      ASSERT_EQ(got[0].height, want->shape[1]) << what;
      ASSERT_EQ(got[0].width, want->shape[2]) << what;
      const Diff d = compare(got, reinterpret_cast<const uint8_t*>(want->data), what);
      EXPECT_LE(d.rel, bound) << what << ": max |delta| " << d.max_abs;
      worst.add(d, c["name"].get<std::string>());
    }
    worst.print(label, name, "goldens,", bound);
  }
}

/// `dtype` on cuda:0 against the same pipeline and dtype on the CPU, over a subset of the
/// recorded cases (every scheduler, CFG off, a batch of two, an odd size): within `bound`.
void expect_cpu_within(const std::string& dtype, double bound) {
  static const std::set<std::string> subset = {
      "default",    "sched_pndm", "sched_ddim",  "sched_euler",    "sched_euler_a",         "sched_dpm++2m",
      "sched_dpm++2m-karras",     "sched_lms",   "sched_unipc",    "no_cfg",                "batch_images_2",
      "odd_size",   "euler_a_batch_images_2",
      // Z-Image's: CFG off, truncated, and a batch of three caption lengths
      "turbo_no_cfg", "cfg_truncation_0_5", "batch_prompts_3"};
  for (const std::string& name : fixtures()) {
    const json doc = cases_of(name);
    Pipelines cuda(name, dtype, "cuda:0"), cpu(name, dtype, "cpu");
    Worst worst;
    for (const json& c : doc["cases"]) {
      if (!subset.count(c["name"].get<std::string>())) continue;
      const std::string what = name + "/" + c["name"].get<std::string>() + " " + dtype;
      const auto batch = test::golden_case_requests(c);
      const std::vector<pipeline::RgbImage> got = cuda.for_case(c).generate(batch);
      const std::vector<pipeline::RgbImage> ref = cpu.for_case(c).generate(batch);
      ASSERT_EQ(got.size(), ref.size()) << what;
      std::vector<uint8_t> ref_bytes;
      for (const auto& img : ref) {
        EXPECT_TRUE(img.finite) << what << ": NaN or Inf on the CPU";
        ref_bytes.insert(ref_bytes.end(), img.pixels.begin(), img.pixels.end());
      }
      ASSERT_EQ(got[0].pixels.size(), ref[0].pixels.size()) << what;
      const Diff d = compare(got, ref_bytes.data(), what);
      EXPECT_LE(d.rel, bound) << what << ": max |delta| " << d.max_abs;
      worst.add(d, c["name"].get<std::string>());
    }
    worst.print(dtype, name, "the cpu,", bound);
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
  expect_goldens_within(1e-3, at::globalContext().allowTF32CuDNN() ? "fp32 (tf32 conv)" : "fp32");
}

TEST(PipelineParityCuda, Fp32WithoutTF32MatchesDiffusers_CUDA) {
  TF32CuDNN off(false);
  expect_goldens_within(1e-3, "fp32 (no tf32)");
}

TEST(PipelineParityCuda, Fp16MatchesTheCpu_CUDA) { expect_cpu_within("fp16", 2e-2); }

TEST(PipelineParityCuda, Bf16MatchesTheCpu_CUDA) { expect_cpu_within("bf16", 2e-2); }

// --weight-storage fp8 (issue 26) on cuda:0 against the CPU, on the fp8 goldens' cases of every family
// (make_fp8_storage_pipelines.py; the CPU run is PipelineParity's, bit for bit with diffusers): the CUDA load
// path builds each stored module on the host and allocates its tensors on the device, which only a GPU runs.
TEST(PipelineParityCuda, Fp8StorageMatchesTheCpu_CUDA) {
  for (const char* name : {"tiny-sd1", "tiny-sdxl", "tiny-z-image", "tiny-qwen-image", "tiny-flux-dev", "tiny-chroma",
                           "tiny-sd3.5-t5"}) {
    std::ifstream in(kData + "/pipelines/" + name + ".golden/fp8/cases.json");
    ASSERT_TRUE(in) << name;
    const json doc = json::parse(in);
    std::map<std::string, std::unique_ptr<Pipelines>> cuda, cpu;  // per weight storage
    Worst worst;
    for (const json& c : doc["cases"]) {
      const std::string storage = c["weight_storage"].get<std::string>();
      if (!cuda[storage]) {
        cuda[storage] = std::make_unique<Pipelines>(name, "bf16", "cuda:0", storage);
        cpu[storage] = std::make_unique<Pipelines>(name, "bf16", "cpu", storage);
      }
      const std::string what = std::string(name) + "/" + c["name"].get<std::string>();
      const auto batch = test::golden_case_requests(c);
      const std::vector<pipeline::RgbImage> got = cuda[storage]->for_case(c).generate(batch);
      const std::vector<pipeline::RgbImage> ref = cpu[storage]->for_case(c).generate(batch);
      ASSERT_EQ(got.size(), ref.size()) << what;
      std::vector<uint8_t> ref_bytes;
      for (const auto& img : ref) ref_bytes.insert(ref_bytes.end(), img.pixels.begin(), img.pixels.end());
      const Diff d = compare(got, ref_bytes.data(), what);
      EXPECT_LE(d.rel, 2e-2) << what << ": max |delta| " << d.max_abs;
      worst.add(d, c["name"].get<std::string>());
    }
    worst.print("bf16 fp8-stored", name, "the cpu,", 2e-2);
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

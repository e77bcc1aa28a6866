// flow_match_euler against diffusers' FlowMatchEulerDiscreteScheduler
// (tools/fixtures/make_flow_match_goldens.py wrote the goldens): the pipelines' sigmas and mu,
// bit-identical timesteps and sigmas, trajectories in float32 and bfloat16, and clear errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/util/error.h"
#include "scheduler_goldens.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using dpinfer::pipeline::Scheduler;
using dpinfer::pipeline::TimestepRequest;
using dpinfer::test::error_of;
using dpinfer::test::expect_contains;
using dpinfer::test::read_json;
using nlohmann::json;

const std::string kDir = std::string(DPINFER_TEST_DATA_DIR) + "/schedulers/flow_match";

json config(const std::string& name) { return read_json(kDir + "/configs/" + name + ".json"); }

// The request of a flow-matching pipeline (FLUX, SD3, Qwen-Image, Z-Image): its own class, or a name.
dpinfer::pipeline::SchedulerRequest flow(const std::string& name = "") {
  return {name, 0.0, nullptr, dpinfer::pipeline::Prediction::kFlowVelocity};
}

// tests/data/schedulers/flow_match: the index, the float32 blob and the configs.
struct Goldens : dpinfer::test::SchedulerGoldens {
  static const Goldens& get() {
    static const Goldens g{SchedulerGoldens::load(kDir)};
    return g;
  }
};

std::string case_label(const json& c) {
  const json& r = c["request"];
  return c["config"].get<std::string>() + "/" + c["mode"].get<std::string>() +
         "/steps=" + std::to_string(r["sigmas"].is_null() ? r["steps"].get<int64_t>() : r["sigmas"].size()) + "/" +
         std::to_string(c["size"][0].get<int>()) + "x" + std::to_string(c["size"][1].get<int>()) + "/" +
         c["dtype"].get<std::string>();
}

// The TimestepRequest the case's diffusers pipeline made.
TimestepRequest request_of(const json& c) {
  const json& r = c["request"];
  TimestepRequest req;
  req.steps = r["steps"].get<int64_t>();
  if (!r["sigmas"].is_null()) req.sigmas = r["sigmas"].get<std::vector<double>>();
  if (!r["mu"].is_null()) req.mu = r["mu"].get<double>();
  if (!r["sigma_min"].is_null()) req.sigma_min = r["sigma_min"].get<double>();
  return req;
}

// The scheduler a diffusers directory with this scheduler_config.json gets: its own class.
std::unique_ptr<Scheduler> build_case(const json& c) {
  auto s = dpinfer::pipeline::make_scheduler(config(c["config"].get<std::string>()), flow());
  s->set_timesteps(request_of(c));
  return s;
}

at::ScalarType dtype_of(const json& c) {
  return c["dtype"].get<std::string>() == "bfloat16" ? at::kBFloat16 : at::kFloat;
}

// The made-up velocity model of the goldens: v = x * (0.3 cos(t / 1000)) + fixed * 0.1 + tanh(x) * 0.05.
at::Tensor model_fn(const at::Tensor& x, double t, const at::Tensor& fixed) {
  const double c = 0.3 * std::cos(t / 1000.0);
  return x * c + fixed * 0.1 + at::tanh(x) * 0.05;
}

// The pipeline loop in `dtype`; returns the sample after every model call.
std::vector<at::Tensor> run(Scheduler& s, const at::Tensor& latents, const at::Tensor& fixed, at::ScalarType dtype) {
  at::Tensor x = latents.to(dtype);
  const at::Tensor f = fixed.to(dtype);
  std::vector<at::Generator> none;
  std::vector<at::Tensor> out;
  const at::Tensor& ts = s.timesteps();
  for (int64_t i = 0; i < ts.size(0); ++i) {
    at::Tensor v = model_fn(x, ts[i].item<double>(), f);
    x = s.step(v, i, x, none);
    out.push_back(x);
  }
  return out;
}

// Distance in units in the last place of `dtype` between two values of that dtype held as floats.
int64_t ulps(float a, float b, at::ScalarType dtype) {
  auto key = [](float v) {  // float bits as a number line: -0 and +0 meet at 0
    int32_t i;
    std::memcpy(&i, &v, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  const int64_t d = std::llabs(key(a) - key(b));
  return dtype == at::kBFloat16 ? d >> 16 : d;
}

int64_t max_ulps(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype) {
  const at::Tensor g = got.to(at::kFloat).contiguous(), w = want.contiguous();
  int64_t worst = 0;
  for (int64_t i = 0; i < g.numel(); ++i)
    worst = std::max(worst, ulps(g.data_ptr<float>()[i], w.data_ptr<float>()[i], dtype));
  return worst;
}

// The error of `fn`, which must throw dpinfer::Error.
TEST(FlowMatchGoldens, InitialTensorsAreTorchRandn) {
  const Goldens& g = Goldens::get();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(g.index["latent_seed"].get<uint64_t>());
  EXPECT_TRUE(at::equal(at::randn(g.shape, gen, at::kFloat), g.latents()));
  auto gen2 = at::make_generator<at::CPUGeneratorImpl>(g.index["fixed_seed"].get<uint64_t>());
  EXPECT_TRUE(at::equal(at::randn(g.shape, gen2, at::kFloat), g.fixed()));
}

// What the pipelines compute for set_timesteps(): np.linspace sigmas and mu, bit for bit.
TEST(FlowMatchGoldens, PipelineSigmasAndMuAreBitIdentical) {
  int64_t checked = 0;
  for (const json& c : Goldens::get().index["cases"]) {
    SCOPED_TRACE(case_label(c));
    const json& r = c["request"];
    if (!r["sigmas"].is_null()) {
      const auto want = r["sigmas"].get<std::vector<double>>();
      EXPECT_EQ(dpinfer::pipeline::flow_match_linear_sigmas(static_cast<int64_t>(want.size())), want);
    }
    const int64_t seq = r["image_seq_len"].get<int64_t>();
    const std::string from = r["mu_from"].is_null() ? "" : r["mu_from"].get<std::string>();
    if (from == "calculate_shift") {
      EXPECT_EQ(dpinfer::pipeline::calculate_shift(seq, config(c["config"].get<std::string>())), r["mu"].get<double>());
      ++checked;
    } else if (from == "compute_empirical_mu") {
      const auto steps = static_cast<int64_t>(r["sigmas"].size());
      EXPECT_EQ(dpinfer::pipeline::compute_empirical_mu(seq, steps), r["mu"].get<double>());
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(FlowMatchGoldens, TimestepsAndSigmasAreBitIdentical) {
  int64_t cases = 0, values = 0, identical = 0;
  for (const json& c : Goldens::get().index["cases"]) {
    if (c.contains("error")) continue;
    SCOPED_TRACE(case_label(c));
    auto s = build_case(c);
    ++cases;
    EXPECT_EQ(s->name(), "flow_match_euler");
    EXPECT_EQ(s->init_noise_sigma(), 1.0);
    for (const char* key : {"timesteps", "sigmas"}) {
      const at::Tensor got = key == std::string("timesteps") ? s->timesteps() : s->sigmas();
      ASSERT_TRUE(got.defined());
      ASSERT_EQ(got.scalar_type(), at::kFloat);
      ASSERT_EQ(got.device().type(), at::kCPU);
      const auto want = c[key].get<std::vector<double>>();
      ASSERT_EQ(got.size(0), static_cast<int64_t>(want.size())) << key;
      for (int64_t i = 0; i < got.size(0); ++i) {
        const float w = static_cast<float>(want[static_cast<size_t>(i)]);
        const float v = got[i].item<float>();
        ++values;
        identical += v == w ? 1 : 0;
        EXPECT_EQ(v, w) << key << "[" << i << "] off by " << ulps(v, w, at::kFloat) << " ulp";
      }
    }
  }
  std::printf("[ flow_match ] %lld cases: %lld of %lld timesteps and sigmas bit-identical\n",
              static_cast<long long>(cases), static_cast<long long>(identical), static_cast<long long>(values));
}

// The trajectory goes through the same ATen kernels as diffusers' torch ops, so it is exact
// on the CPU that recorded it; other CPUs' vector kernels may round tanh and the like a
// little differently, which 64 float32 ulp and 2 bfloat16 ulp cover (measured here: 0 with
// ATEN_CPU_CAPABILITY default, avx2 and avx512).
TEST(FlowMatchGoldens, TrajectoriesMatchDiffusers) {
  const Goldens& g = Goldens::get();
  const at::Tensor fixed = g.fixed(), latents = g.latents();
  int64_t records = 0, identical = 0, worst_f32 = 0, worst_bf16 = 0;
  for (const json& c : g.index["cases"]) {
    if (c.contains("error")) continue;
    SCOPED_TRACE(case_label(c));
    auto s = build_case(c);
    const at::ScalarType dtype = dtype_of(c);
    std::vector<at::Tensor> got = run(*s, latents, fixed, dtype);
    const json& rec = c["recorded_steps"];
    const at::Tensor want = g.tensors(c["offset"].get<int64_t>(), static_cast<int64_t>(rec.size()));
    for (size_t k = 0; k < rec.size(); ++k) {
      const auto step = rec[k].get<size_t>();
      ASSERT_LT(step, got.size());
      ASSERT_EQ(got[step].scalar_type(), dtype);
      const at::Tensor w = want[static_cast<int64_t>(k)];
      ++records;
      identical += at::equal(got[step].to(at::kFloat), w) ? 1 : 0;
      const int64_t u = max_ulps(got[step], w, dtype);
      int64_t& worst = dtype == at::kFloat ? worst_f32 : worst_bf16;
      worst = std::max(worst, u);
      EXPECT_LE(u, dtype == at::kFloat ? 64 : 2) << "after model call " << step;
    }
  }
  std::printf("[ flow_match ] %lld recorded samples, %lld bit-identical; worst %lld ulp (float32), %lld ulp "
              "(bfloat16)\n",
              static_cast<long long>(records), static_cast<long long>(identical), static_cast<long long>(worst_f32),
              static_cast<long long>(worst_bf16));
}

// The same loop with the latents on the GPU: the sigmas stay on the CPU as 0-d tensors, so
// only the GPU's float rounding of the model function and the update differs.
TEST(FlowMatchGoldens, TrajectoriesMatchDiffusersOnTheGpu_CUDA) {
  const Goldens& g = Goldens::get();
  const at::Tensor fixed = g.fixed().cuda(), latents = g.latents().cuda();
  double worst = 0;
  for (const json& c : g.index["cases"]) {
    if (c.contains("error") || dtype_of(c) != at::kFloat) continue;
    SCOPED_TRACE(case_label(c));
    auto s = build_case(c);
    std::vector<at::Tensor> got = run(*s, latents, fixed, at::kFloat);
    const json& rec = c["recorded_steps"];
    const at::Tensor want = g.tensors(c["offset"].get<int64_t>(), static_cast<int64_t>(rec.size()));
    for (size_t k = 0; k < rec.size(); ++k) {
      const at::Tensor got_k = got[rec[k].get<size_t>()];
      ASSERT_TRUE(got_k.is_cuda());
      const at::Tensor w = want[static_cast<int64_t>(k)];
      const double err = (got_k.cpu() - w).abs().max().item<double>() / w.abs().max().item<double>();
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-5);
    }
  }
  std::printf("[ flow_match ] on the GPU: worst max|diff|/max|golden| %.3g\n", worst);
}

// diffusers gives NaN sigmas where shift_terminal meets a one-step schedule (Qwen-Image with
// 1 step); dpinfer refuses the request instead, naming the field.
TEST(FlowMatchGoldens, WhereDiffusersGetsNaNItIsAClearError) {
  int64_t cases = 0;
  for (const json& c : Goldens::get().index["cases"]) {
    if (!c.contains("error")) continue;
    SCOPED_TRACE(case_label(c));
    ++cases;
    auto s = dpinfer::pipeline::make_scheduler(config(c["config"].get<std::string>()), flow());
    expect_contains(error_of([&] { s->set_timesteps(request_of(c)); }),
                    {"flow_match_euler", "shift_terminal", "2 or more steps"});
  }
  EXPECT_GE(cases, 5);
}

// models.md §4.1: SD3 shifts the shifted training range again; its last sigma is shift(shift(1/1000)).
TEST(FlowMatchScheduler, SD3ShiftsTwice) {
  auto s = dpinfer::pipeline::make_scheduler(config("sd3-medium"), flow());
  s->set_timesteps(28);
  const double once = 3.0 * 0.001 / (1 + 2.0 * 0.001);
  const double twice = 3.0 * once / (1 + 2.0 * once);
  EXPECT_NEAR(s->sigmas()[-2].item<double>(), twice, 1e-7);
  EXPECT_NEAR(s->sigmas()[-2].item<double>(), 0.0089286, 1e-7);
  EXPECT_EQ(s->sigmas()[-1].item<double>(), 0.0);
  EXPECT_EQ(s->timesteps()[0].item<double>(), 1000.0);
}

TEST(FlowMatchScheduler, IsARowOfTheSchedulerTable) {
  const auto names = dpinfer::pipeline::scheduler_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "flow_match_euler"), names.end());
  EXPECT_EQ(dpinfer::pipeline::scheduler_class("flow_match_euler"), "FlowMatchEulerDiscreteScheduler");
  EXPECT_EQ(dpinfer::pipeline::a1111_sampler_name("flow_match_euler"), "Euler");
  EXPECT_EQ(dpinfer::pipeline::scheduler_fixed_keys("flow_match_euler"), json::object());
  auto s = dpinfer::pipeline::make_scheduler(config("flux1-dev"), flow("flow_match_euler"));
  EXPECT_EQ(s->name(), "flow_match_euler");
  EXPECT_FALSE(s->needs_generator());
  EXPECT_FALSE(s->sigmas().defined());
  // Another class's config builds it by name with FlowMatchEulerDiscreteScheduler's defaults.
  json euler = config("sd3-medium");
  euler["_class_name"] = "EulerDiscreteScheduler";
  euler.erase("shift");
  auto plain = dpinfer::pipeline::make_scheduler(euler, flow("flow_match_euler"));
  plain->set_timesteps(4);
  EXPECT_TRUE(at::allclose(plain->timesteps(), at::tensor({1000.0f, 667.0f, 334.0f, 1.0f})));
}

// A flow-matching model runs the identity input scaling, a unit initial noise and x + dt * v.
// A scheduler of the other kind runs without error and makes noise: make_scheduler() refuses
// the pairing both ways, naming the schedulers that fit, whether chosen by name or by the
// config's own _class_name.
TEST(FlowMatchScheduler, OnlyStepsAFlowMatchingDenoiser) {
  using dpinfer::pipeline::Prediction;
  using dpinfer::pipeline::scheduler_names;
  EXPECT_EQ(scheduler_names(Prediction::kFlowVelocity), std::vector<std::string>{"flow_match_euler"});
  const auto noise = scheduler_names(Prediction::kNoise);
  EXPECT_EQ(std::find(noise.begin(), noise.end(), "flow_match_euler"), noise.end());
  EXPECT_EQ(noise.size() + 1, scheduler_names().size());

  json sd15 = read_json(std::string(DPINFER_TEST_DATA_DIR) + "/schedulers/configs/sd15.json");
  expect_contains(error_of([&] { dpinfer::pipeline::make_scheduler(sd15, {"flow_match_euler"}); }),
                  {"scheduler 'flow_match_euler'", "FlowMatchEulerDiscreteScheduler", "flow velocity",
                   "this model predicts noise", "choose one of: pndm, ddim"});
  expect_contains(error_of([] { dpinfer::pipeline::make_scheduler(config("flux1-dev"), {}); }),
                  {"the config's own _class_name", "this model predicts noise", "pndm"});
  expect_contains(error_of([&] { dpinfer::pipeline::make_scheduler(config("flux1-dev"), flow("euler")); }),
                  {"scheduler 'euler'", "EulerDiscreteScheduler", "predicts noise",
                   "this model predicts a flow velocity", "choose one of: flow_match_euler"});
  expect_contains(error_of([&] { dpinfer::pipeline::make_scheduler(sd15, flow()); }),
                  {"scheduler 'pndm'", "the config's own _class_name", "choose one of: flow_match_euler"});
}

TEST(FlowMatchScheduler, StepIsEulerOnTheVelocityInTheOutputsDtype) {
  auto s = dpinfer::pipeline::make_scheduler(config("flux1-schnell"), flow());
  TimestepRequest req;
  req.sigmas = dpinfer::pipeline::flow_match_linear_sigmas(4);
  req.mu = 0.7;  // ignored: FLUX.1-schnell's shift is static
  s->set_timesteps(req);
  EXPECT_TRUE(at::equal(s->sigmas(), at::tensor({1.0f, 0.75f, 0.5f, 0.25f, 0.0f})));
  EXPECT_TRUE(at::equal(s->timesteps(), at::tensor({1000.0f, 750.0f, 500.0f, 250.0f})));
  const at::Tensor x = at::full({1, 3, 4}, 2.0f, at::kFloat);
  EXPECT_TRUE(at::equal(s->scale_model_input(x, 0), x));
  std::vector<at::Generator> none;
  const at::Tensor v = at::full({1, 3, 4}, 4.0f, at::kBFloat16);
  const at::Tensor next = s->step(v, 1, x, none);
  EXPECT_EQ(next.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(next, at::full({1, 3, 4}, 1.0f, at::kBFloat16)));  // 2 + (0.5 - 0.75) * 4
  expect_contains(error_of([&] { s->step(v, 4, x, none); }), {"flow_match_euler", "index 5", "5 noise levels"});
}

TEST(FlowMatchScheduler, DynamicShiftingNeedsMu) {
  for (const char* name : {"flux1-dev", "qwen-image"}) {
    SCOPED_TRACE(name);
    auto s = dpinfer::pipeline::make_scheduler(config(name), flow());
    expect_contains(error_of([&] { s->set_timesteps(28); }),
                    {"scheduler flow_match_euler", "use_dynamic_shifting", "needs mu", "calculate_shift"});
  }
}

TEST(FlowMatchScheduler, RequestsThatDoNotFitAreClearErrors) {
  auto s = dpinfer::pipeline::make_scheduler(config("flux1-dev"), flow());
  TimestepRequest req;
  req.steps = 5;
  req.sigmas = dpinfer::pipeline::flow_match_linear_sigmas(4);
  req.mu = 1.0;
  expect_contains(error_of([&] { s->set_timesteps(req); }), {"4 sigmas", "5 steps"});
  req = {};
  req.mu = 1.0;
  expect_contains(error_of([&] { s->set_timesteps(req); }), {"num_inference_steps", "got 0"});
  req.steps = 4;
  req.mu = std::nan("");
  expect_contains(error_of([&] { s->set_timesteps(req); }), {"mu", "finite"});
  expect_contains(error_of([] { dpinfer::pipeline::flow_match_linear_sigmas(0); }), {"at least 1 step", "got 0"});

  // The discrete schedulers take a step count only.
  json sd15 = read_json(std::string(DPINFER_TEST_DATA_DIR) + "/schedulers/configs/sd15.json");
  auto euler = dpinfer::pipeline::make_scheduler(sd15, {"euler"});
  req = {};
  req.steps = 4;
  req.sigma_min = 0.0;
  expect_contains(error_of([&] { euler->set_timesteps(req); }), {"euler", "step count only", "sigma_min"});
}

TEST(FlowMatchScheduler, UnsupportedOptionsNameTheField) {
  auto build = [](const json& c) { return dpinfer::pipeline::make_scheduler(c, flow()); };
  json c = config("qwen-image");
  c["use_beta_sigmas"] = true;
  expect_contains(error_of([&] { build(c); }), {"use_beta_sigmas", "true is not supported", "beta sigmas"});
  c = config("qwen-image");
  c["stochastic_sampling"] = true;
  expect_contains(error_of([&] { build(c); }), {"stochastic_sampling", "true is not supported", "flow_match_euler"});
  c = config("qwen-image");
  c["time_shift_type"] = "cosine";
  expect_contains(error_of([&] { build(c); }), {"time_shift_type", "'cosine'", "exponential, linear"});
  c = config("karras");
  c["use_exponential_sigmas"] = true;
  expect_contains(error_of([&] { build(c); }), {"use_karras_sigmas", "use_exponential_sigmas", "at most one"});
  c = config("sd3-medium");
  c["shift"] = "3.0";
  expect_contains(error_of([&] { build(c); }), {"shift", "must be a number", "'3.0'"});
  c = config("sd3-medium");
  c["num_train_timesteps"] = 0;
  expect_contains(error_of([&] { build(c); }), {"num_train_timesteps"});
  expect_contains(error_of([] { dpinfer::pipeline::calculate_shift(4096, json{{"max_shift", "1.15"}}); }),
                  {"max_shift", "must be a number"});
}

// calculate_shift reads the scheduler config as the pipelines do, with the class defaults.
TEST(FlowMatchScheduler, CalculateShiftUsesTheClassDefaults) {
  EXPECT_EQ(dpinfer::pipeline::calculate_shift(4096, json::object()),
            dpinfer::pipeline::calculate_shift(4096, 256, 4096, 0.5, 1.15));
  EXPECT_NEAR(dpinfer::pipeline::calculate_shift(4096, json::object()), 1.15, 1e-12);
  EXPECT_NEAR(dpinfer::pipeline::calculate_shift(256, config("qwen-image")), 0.5, 1e-12);
  EXPECT_NEAR(dpinfer::pipeline::calculate_shift(8192, config("qwen-image")), 0.9, 1e-12);
  // Not clamped: 2048x2048 on FLUX.1-dev extrapolates past max_shift, as in diffusers.
  EXPECT_GT(dpinfer::pipeline::calculate_shift(16384, config("flux1-dev")), 1.15);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// The schedulers against diffusers' own (tools/fixtures/make_scheduler_goldens.py wrote the
// goldens): identical timesteps, matching sigmas and trajectories, and clear config errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/families/stable_diffusion.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/util/error.h"
#include "scheduler_goldens.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using dpinfer::pipeline::Scheduler;
using dpinfer::test::error_of;
using dpinfer::test::expect_contains;
using dpinfer::test::read_json;
using nlohmann::json;

namespace {

/// A scheduler as a StableDiffusionPipeline user gets it: with the pipeline's rewrite of
/// old configs (the goldens were recorded that way).
std::unique_ptr<Scheduler> make_scheduler(const json& config, const std::string& name, double eta = 0.0) {
  return dpinfer::pipeline::make_scheduler(config, {name, eta, dpinfer::pipeline::stable_diffusion_scheduler_rewrite});
}

}  // namespace

const std::string kDir = std::string(DPINFER_TEST_DATA_DIR) + "/schedulers";

// tests/data/schedulers: the index, the float32 blob and the configs.
struct Goldens : dpinfer::test::SchedulerGoldens {
  static const Goldens& get() {
    static const Goldens g{SchedulerGoldens::load(kDir)};
    return g;
  }
};

std::string case_label(const json& c) {
  std::string s = c["config"].get<std::string>() + "/" +
                  (c["scheduler"].get<std::string>().empty() ? "(native)" : c["scheduler"].get<std::string>()) +
                  "/steps=" + std::to_string(c["steps"].get<int64_t>());
  if (c["eta"].get<double>() > 0) s += "/eta=" + std::to_string(c["eta"].get<double>());
  return s;
}

std::unique_ptr<Scheduler> build_case(const json& c) {
  json config = read_json(kDir + "/configs/" + c["config"].get<std::string>() + ".json");
  auto s = make_scheduler(config, c["scheduler"].get<std::string>(), c["eta"].get<double>());
  s->set_timesteps(c["steps"].get<int64_t>());
  return s;
}

std::vector<at::Generator> generators_for(const json& seeds) {
  std::vector<at::Generator> gens;
  for (const auto& s : seeds) gens.push_back(at::make_generator<at::CPUGeneratorImpl>(s.get<uint64_t>()));
  return gens;
}

// The made-up model of the goldens: eps = x_in * (0.3 cos(t / 1000)) + fixed * 0.1 + tanh(x_in) * 0.05.
at::Tensor model_fn(const at::Tensor& x_in, double t, const at::Tensor& fixed) {
  const double c = 0.3 * std::cos(t / 1000.0);
  return x_in * c + fixed * 0.1 + at::tanh(x_in) * 0.05;
}

// The pipeline loop; returns the sample after every model call.
std::vector<at::Tensor> run(Scheduler& s, at::Tensor x, const at::Tensor& fixed, std::vector<at::Generator>& gens) {
  x = x * s.init_noise_sigma();
  std::vector<at::Tensor> out;
  const at::Tensor& ts = s.timesteps();
  for (int64_t i = 0; i < ts.size(0); ++i) {
    at::Tensor x_in = s.scale_model_input(x, i);
    at::Tensor eps = model_fn(x_in, ts[i].item<double>(), fixed);
    x = s.step(eps, i, x, gens);
    out.push_back(x);
  }
  return out;
}

// The goldens are bit-identical to dpinfer on the CPU they were recorded on (the
// counts printed below say so), but torch's float32 kernels round differently on
// other CPUs (vectorised cumprod/exp/log paths): goldens recorded on one x86-64
// machine and dpinfer on another differed by up to 2.8e-7 (timesteps), 1.3e-6
// (sigmas) and 5.9e-5 (zsnr_trailing trajectories, whose first sigma is 4096); with
// ATEN_CPU_CAPABILITY=default, 1.2e-6 on a Karras timestep near 0.
// The bounds leave a few times that, still far below any formula slip.
constexpr double kCrossCpuScalar = 5e-6;
constexpr double kCrossCpuSigma = 5e-6;
constexpr double kCrossCpuTrajectory = 2e-4;

// |got - want| / |want| (|got| when want is 0).
double relative(double got, double want) {
  return want == 0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);
}

// max |a - b| / max |b|.
double rel_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

TEST(SchedulerGoldens, InitialNoiseIsTorchRandn) {
  const Goldens& g = Goldens::get();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(g.index["latent_seed"].get<uint64_t>());
  EXPECT_TRUE(at::equal(at::randn(g.shape, gen, at::kFloat), g.latents()));
  auto gen2 = at::make_generator<at::CPUGeneratorImpl>(g.index["fixed_seed"].get<uint64_t>());
  EXPECT_TRUE(at::equal(at::randn(g.shape, gen2, at::kFloat), g.fixed()));
}

TEST(SchedulerGoldens, TimestepsAndSigmasMatchDiffusers) {
  const Goldens& g = Goldens::get();
  int64_t cases = 0, sigma_values = 0, sigma_exact = 0;
  double worst_sigma = 0;
  for (const json& c : g.index["cases"]) {
    SCOPED_TRACE(case_label(c));
    auto s = build_case(c);
    ++cases;
    EXPECT_EQ(s->name(), c["name"].get<std::string>());
    const at::Tensor& ts = s->timesteps();
    const std::string dtype = c["timesteps_dtype"].get<std::string>();
    ASSERT_EQ(ts.scalar_type(), dtype == "int64" ? at::kLong : at::kFloat);
    ASSERT_EQ(ts.size(0), static_cast<int64_t>(c["timesteps"].size()));
    for (int64_t i = 0; i < ts.size(0); ++i) {
      if (dtype == "int64") {
        EXPECT_EQ(ts[i].item<int64_t>(), c["timesteps"][i].get<int64_t>()) << "timestep " << i;
      } else {
        EXPECT_LE(relative(ts[i].item<float>(), c["timesteps"][i].get<double>()), kCrossCpuScalar)
            << "timestep " << i << ": got " << ts[i].item<float>() << ", want " << c["timesteps"][i].get<double>();
      }
    }
    EXPECT_LE(relative(static_cast<float>(s->init_noise_sigma()), c["init_noise_sigma"].get<double>()), kCrossCpuScalar)
        << "init_noise_sigma: got " << s->init_noise_sigma() << ", want " << c["init_noise_sigma"].get<double>();
    at::Tensor sig = s->sigmas();
    if (c["sigmas"].is_null()) {
      EXPECT_FALSE(sig.defined());
      continue;
    }
    ASSERT_TRUE(sig.defined());
    ASSERT_EQ(sig.size(0), static_cast<int64_t>(c["sigmas"].size()));
    for (int64_t i = 0; i < sig.size(0); ++i) {
      const auto want = static_cast<float>(c["sigmas"][i].get<double>());
      const float got = sig[i].item<float>();
      ++sigma_values;
      sigma_exact += got == want ? 1 : 0;
      const double rel = relative(got, want);
      worst_sigma = std::max(worst_sigma, rel);
      EXPECT_LE(rel, kCrossCpuSigma) << "sigma " << i << ": got " << got << ", want " << want;
    }
  }
  std::printf("[ schedulers ] %lld cases; sigmas: %lld of %lld bit-identical, worst relative error %.3g\n",
              static_cast<long long>(cases), static_cast<long long>(sigma_exact), static_cast<long long>(sigma_values),
              worst_sigma);
}

TEST(SchedulerGoldens, TrajectoriesMatchDiffusers) {
  const Goldens& g = Goldens::get();
  const at::Tensor fixed = g.fixed(), latents = g.latents();
  double worst = 0;
  std::string worst_case;
  int64_t records = 0, identical = 0;
  for (const json& c : g.index["cases"]) {
    SCOPED_TRACE(case_label(c));
    auto s = build_case(c);
    std::vector<at::Generator> gens = generators_for(c["generator_seeds"]);
    std::vector<at::Tensor> got = run(*s, latents, fixed, gens);
    const json& rec = c["recorded_steps"];
    at::Tensor want = g.tensors(c["offset"].get<int64_t>(), static_cast<int64_t>(rec.size()));
    double case_worst = 0;
    for (size_t k = 0; k < rec.size(); ++k) {
      const auto step = rec[k].get<size_t>();
      ASSERT_LT(step, got.size());
      ASSERT_EQ(got[step].scalar_type(), at::kFloat);
      const double err = rel_error(got[step], want[static_cast<int64_t>(k)]);
      ++records;
      identical += at::equal(got[step], want[static_cast<int64_t>(k)]) ? 1 : 0;
      case_worst = std::max(case_worst, err);
      EXPECT_LE(err, kCrossCpuTrajectory) << "after model call " << step;
    }
    if (case_worst > worst) {
      worst = case_worst;
      worst_case = case_label(c);
    }
  }
  std::printf("[ schedulers ] %lld recorded samples, %lld bit-identical; worst max|diff|/max|golden| %.3g (%s)\n",
              static_cast<long long>(records), static_cast<long long>(identical), worst, worst_case.c_str());
}

// The same loop with the latents on the GPU: the schedulers keep their 0-d coefficients on
// the CPU and draw noise on the CPU, so only float32 rounding of the GPU kernels differs.
TEST(SchedulerGoldens, TrajectoriesMatchDiffusersOnTheGpu_CUDA) {
  const Goldens& g = Goldens::get();
  const at::Tensor fixed = g.fixed().cuda(), latents = g.latents().cuda();
  double worst = 0;
  std::string worst_case;
  for (const json& c : g.index["cases"]) {
    SCOPED_TRACE(case_label(c));
    auto s = build_case(c);
    std::vector<at::Generator> gens = generators_for(c["generator_seeds"]);
    std::vector<at::Tensor> got = run(*s, latents, fixed, gens);
    const json& rec = c["recorded_steps"];
    at::Tensor want = g.tensors(c["offset"].get<int64_t>(), static_cast<int64_t>(rec.size()));
    for (size_t k = 0; k < rec.size(); ++k) {
      const auto step = rec[k].get<size_t>();
      ASSERT_TRUE(got[step].is_cuda());
      const double err = rel_error(got[step].cpu(), want[static_cast<int64_t>(k)]);
      if (err > worst) {
        worst = err;
        worst_case = case_label(c);
      }
      EXPECT_LE(err, 1e-4) << "after model call " << step;
    }
  }
  std::printf("[ schedulers ] on the GPU: worst max|diff|/max|golden| %.3g (%s)\n", worst, worst_case.c_str());
}

json sd15() { return read_json(kDir + "/configs/sd15.json"); }

// One generator per row: a batched run equals each row run alone (what the pipeline's
// data-parallel split relies on).
TEST(SchedulerGenerators, BatchedRunEqualsRowsAlone) {
  const Goldens& g = Goldens::get();
  for (auto [name, eta] : {std::pair<std::string, double>{"euler_a", 0.0}, {"ddim", 0.5}}) {
    SCOPED_TRACE(name);
    auto both = make_scheduler(sd15(), name, eta);
    ASSERT_TRUE(both->needs_generator());
    both->set_timesteps(6);
    std::vector<at::Generator> gens = generators_for(json::array({11, 12}));
    at::Tensor batched = run(*both, g.latents(), g.fixed(), gens).back();
    for (int64_t row = 0; row < 2; ++row) {
      auto one = make_scheduler(sd15(), name, eta);
      one->set_timesteps(6);
      std::vector<at::Generator> gen = generators_for(json::array({11 + row}));
      at::Tensor alone = run(*one, g.latents().slice(0, row, row + 1), g.fixed().slice(0, row, row + 1), gen).back();
      EXPECT_TRUE(at::equal(alone, batched.slice(0, row, row + 1))) << "row " << row;
    }
  }
}

// The error of `fn`, which must throw dpinfer::Error.
TEST(SchedulerConfig, NamesAreTheDocumentedOnes) {
  EXPECT_EQ(
      dpinfer::pipeline::scheduler_names(),
      (std::vector<std::string>{"pndm", "ddim", "euler", "euler_a", "dpm++2m", "dpm++2m-karras", "lms", "unipc",
                                "flow_match_euler"}));
  // flow_match_euler steps flow-matching models only (test_flow_match_scheduler.cpp).
  for (const std::string& n : dpinfer::pipeline::scheduler_names(dpinfer::pipeline::Prediction::kNoise))
    EXPECT_EQ(make_scheduler(sd15(), n)->name(), n);
  EXPECT_EQ(make_scheduler(sd15(), "")->name(), "pndm");
}

TEST(SchedulerConfig, UnknownNameListsTheValidOnes) {
  expect_contains(error_of([] { make_scheduler(sd15(), "heun"); }),
                  {"unknown scheduler 'heun'", "pndm", "ddim", "euler_a", "dpm++2m-karras", "lms", "unipc"});
}

TEST(SchedulerConfig, UnsupportedValuesNameTheField) {
  json c = sd15();
  c["beta_schedule"] = "sigmoid";
  expect_contains(error_of([&] { make_scheduler(c, "ddim"); }), {"beta_schedule", "'sigmoid'", "scaled_linear"});

  c = sd15();
  c["timestep_spacing"] = "uniform";
  expect_contains(error_of([&] { make_scheduler(c, "euler"); }), {"timestep_spacing", "'uniform'", "trailing"});

  c = sd15();
  c["prediction_type"] = "sample";
  expect_contains(error_of([&] { make_scheduler(c, "euler_a"); }), {"prediction_type", "'sample'", "euler_a"});
  expect_contains(error_of([&] { make_scheduler(c, ""); }), {"prediction_type", "pndm"});
  EXPECT_NO_THROW(make_scheduler(c, "ddim"));

  c = sd15();
  c["algorithm_type"] = "dpmsolver";
  expect_contains(error_of([&] { make_scheduler(c, "dpm++2m"); }), {"algorithm_type", "'dpmsolver'", "dpmsolver++"});

  c = sd15();
  c["use_beta_sigmas"] = true;
  expect_contains(error_of([&] { make_scheduler(c, "euler"); }), {"use_beta_sigmas", "beta sigmas"});

  c = sd15();
  c["beta_start"] = "0.00085";
  expect_contains(error_of([&] { make_scheduler(c, "lms"); }), {"beta_start", "must be a number", "'0.00085'"});

  c = sd15();
  c["trained_betas"] = json::array({0.1, 0.2});
  expect_contains(error_of([&] { make_scheduler(c, "ddim"); }), {"trained_betas", "2 values", "1000"});
}

TEST(SchedulerConfig, ClassNameIsRequiredUnlessOneIsNamed) {
  json c = sd15();
  c.erase("_class_name");
  expect_contains(error_of([&] { make_scheduler(c, ""); }), {"_class_name", "missing"});
  EXPECT_EQ(make_scheduler(c, "euler")->name(), "euler");
  c["_class_name"] = "HeunDiscreteScheduler";
  expect_contains(error_of([&] { make_scheduler(c, ""); }), {"'HeunDiscreteScheduler'", "not supported", "unipc"});
  expect_contains(error_of([] { make_scheduler(json::array(), ""); }), {"json object"});
  expect_contains(error_of([] { make_scheduler(sd15(), "ddim", -0.5); }), {"eta", ">= 0"});
}

TEST(SchedulerConfig, NativeKarrasDpmIsNamedSo) {
  json c = sd15();
  c["_class_name"] = "DPMSolverMultistepScheduler";
  EXPECT_EQ(make_scheduler(c, "")->name(), "dpm++2m");
  c["use_karras_sigmas"] = true;
  EXPECT_EQ(make_scheduler(c, "")->name(), "dpm++2m-karras");
  EXPECT_EQ(make_scheduler(c, "dpm++2m")->name(), "dpm++2m");
}

// Issue 11: a model whose config asks for Karras sigmas (many SD1.5 fine-tunes ship one). Its own
// scheduler, and --scheduler dpm++2m-karras, give Karras sigmas, as diffusers'
// DPMSolverMultistepScheduler.from_config(config) does; --scheduler dpm++2m means AUTOMATIC1111's
// "DPM++ 2M" and gives plain sigmas whatever the config says. Every other key comes from the config.
TEST(SchedulerConfig, AKarrasConfiguredModelWithBothNames) {
  json c = sd15();
  c["_class_name"] = "DPMSolverMultistepScheduler";
  c["use_karras_sigmas"] = true;
  auto own = make_scheduler(c, "");
  auto karras = make_scheduler(c, "dpm++2m-karras");
  auto plain = make_scheduler(c, "dpm++2m");
  json unset = c;
  unset.erase("use_karras_sigmas");
  auto reference = make_scheduler(unset, "dpm++2m");
  for (Scheduler* s : {own.get(), karras.get(), plain.get(), reference.get()}) s->set_timesteps(20);
  EXPECT_TRUE(at::equal(own->sigmas(), karras->sigmas()));
  EXPECT_TRUE(at::equal(own->timesteps(), karras->timesteps()));
  EXPECT_FALSE(at::allclose(own->sigmas(), plain->sigmas()));
  EXPECT_TRUE(at::equal(plain->sigmas(), reference->sigmas()));
  // The only keys the names fix, for the README's --scheduler table.
  EXPECT_EQ(dpinfer::pipeline::scheduler_fixed_keys("dpm++2m"), json({{"use_karras_sigmas", false}}));
  EXPECT_EQ(dpinfer::pipeline::scheduler_fixed_keys("dpm++2m-karras"), json({{"use_karras_sigmas", true}}));
  for (const char* name : {"pndm", "ddim", "euler", "euler_a", "lms", "unipc", "flow_match_euler"})
    EXPECT_EQ(dpinfer::pipeline::scheduler_fixed_keys(name), json::object()) << name;
}

TEST(SchedulerUse, MisuseIsAClearError) {
  const Goldens& g = Goldens::get();
  auto s = make_scheduler(sd15(), "euler_a");
  std::vector<at::Generator> none;
  expect_contains(error_of([&] { s->step(g.latents(), 0, g.latents(), none); }), {"set_timesteps"});
  s->set_timesteps(4);
  expect_contains(error_of([&] { s->step(g.latents(), 0, g.latents(), none); }),
                  {"euler_a", "one generator per batch row (2)", "got 0"});

  auto p = make_scheduler(sd15(), "pndm");
  p->set_timesteps(4);
  expect_contains(error_of([&] { p->step(g.latents(), 1, g.latents(), none); }),
                  {"pndm", "step_index 1", "expected 0"});
  expect_contains(error_of([&] { p->set_timesteps(0); }), {"num_inference_steps", "got 0"});
  json prk = sd15();
  prk["skip_prk_steps"] = false;
  auto q = make_scheduler(prk, "");
  expect_contains(error_of([&] { q->set_timesteps(3); }), {"skip_prk_steps", "at least 4"});
}

// Karras sigmas on cosine betas repeat the first timestep, so diffusers starts one index late
// and runs off the end of its sigmas (IndexError); dpinfer follows it there with a clear error.
TEST(SchedulerUse, ASchedulePastItsSigmasIsAClearError) {
  const Goldens& g = Goldens::get();
  auto s = make_scheduler(read_json(kDir + "/configs/cosine_sample.json"), "dpm++2m-karras");
  s->set_timesteps(4);
  std::vector<at::Generator> none;
  expect_contains(error_of([&] { run(*s, g.latents(), g.fixed(), none); }),
                  {"dpm++2m-karras", "index 5", "5 noise levels"});
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

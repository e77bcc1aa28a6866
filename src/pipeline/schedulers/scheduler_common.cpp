// Ref: diffusers/schedulers/scheduling_ddim.py (betas_for_alpha_bar, rescale_zero_terminal_snr,
//      _threshold_sample), scheduling_euler_discrete.py (_sigma_to_t, _convert_to_karras,
//      _convert_to_exponential), diffusers/utils/torch_utils.py (randn_tensor),
//      numpy/_core/function_base.py (linspace), numpy/_core/src/multiarray (arange, interp).
#include "scheduler_common.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "dpinfer/io/python_json.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::schedulers {

ConfigReader::ConfigReader(nlohmann::json config, std::string who)
    : io::ConfigReader(std::move(config), "scheduler_config.json (read by the " + who + " scheduler)",
                       "change the config or pick another --scheduler"),
      who_(std::move(who)) {}

void ConfigReader::refuse(const std::string& key, const std::string& value, const std::string& supported) const {
  throw error(key, value + " is not supported (supported: " + supported + ")");
}

void ConfigReader::require_false(const std::string& key, const std::string& what) const {
  if (boolean(key, false)) refuse(key, "true", "false; dpinfer does not implement " + what);
}

int64_t step_count(const TimestepRequest& request, const std::string& who) {
  if (request.mu || !request.sigmas.empty() || request.sigma_min)
    throw Error("scheduler " + who +
                " takes a step count only, not custom sigmas, mu or sigma_min; use a flow-matching scheduler");
  return request.steps;
}

Prediction read_prediction(const ConfigReader& cfg, const std::vector<Prediction>& allowed) {
  const std::string value = cfg.string("prediction_type", "epsilon");
  Prediction p;
  if (value == "epsilon") {
    p = Prediction::kEpsilon;
  } else if (value == "v_prediction") {
    p = Prediction::kVPrediction;
  } else if (value == "sample") {
    p = Prediction::kSample;
  } else {
    p = static_cast<Prediction>(-1);
  }
  if (std::find(allowed.begin(), allowed.end(), p) == allowed.end()) {
    std::string names;
    for (Prediction a : allowed) {
      if (!names.empty()) names += ", ";
      names += a == Prediction::kEpsilon ? "epsilon" : a == Prediction::kVPrediction ? "v_prediction" : "sample";
    }
    cfg.refuse("prediction_type", "'" + value + "'", names);
  }
  return p;
}

Spacing read_spacing(const ConfigReader& cfg, Spacing fallback) {
  if (!cfg.has("timestep_spacing")) return fallback;
  const std::string value = cfg.string("timestep_spacing", "");
  if (value == "linspace") return Spacing::kLinspace;
  if (value == "leading") return Spacing::kLeading;
  if (value == "trailing") return Spacing::kTrailing;
  cfg.refuse("timestep_spacing", "'" + value + "'", "linspace, leading, trailing");
}

namespace {

// Ref: betas_for_alpha_bar, alpha_transform_type "cosine", max_beta 0.999 (Python floats).
at::Tensor cosine_betas(int64_t num) {
  auto alpha_bar = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2.0); };
  std::vector<float> betas(static_cast<size_t>(num));
  for (int64_t i = 0; i < num; ++i) {
    double t1 = static_cast<double>(i) / static_cast<double>(num);
    double t2 = static_cast<double>(i + 1) / static_cast<double>(num);
    betas[static_cast<size_t>(i)] = static_cast<float>(std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999));
  }
  return at::tensor(betas, at::kFloat);
}

// Ref: rescale_zero_terminal_snr; the same torch ops in the same order.
at::Tensor rescale_zero_terminal_snr(const at::Tensor& betas) {
  at::Tensor alphas = 1.0 - betas;
  at::Tensor alphas_bar_sqrt = at::cumprod(alphas, 0).sqrt();
  at::Tensor first = alphas_bar_sqrt[0].clone();
  at::Tensor last = alphas_bar_sqrt[-1].clone();
  alphas_bar_sqrt -= last;
  alphas_bar_sqrt *= first / (first - last);
  at::Tensor alphas_bar = alphas_bar_sqrt.pow(2);
  at::Tensor ratios = alphas_bar.slice(0, 1) / alphas_bar.slice(0, 0, -1);
  return 1 - at::cat({alphas_bar.slice(0, 0, 1), ratios});
}

}  // namespace

NoiseSchedule make_noise_schedule(const ConfigReader& cfg, const NoiseScheduleOptions& options) {
  NoiseSchedule out;
  out.num_train_timesteps = cfg.integer("num_train_timesteps", 1000);
  const int64_t n = out.num_train_timesteps;
  if (n < 2) {
    throw Error(
        fmt::format("scheduler_config.json: num_train_timesteps must be at least 2, got {}; fix the config", n));
  }
  at::Tensor betas;
  std::vector<double> trained = cfg.number_list("trained_betas");
  if (!trained.empty()) {
    if (static_cast<int64_t>(trained.size()) != n) {
      throw Error(
          fmt::format("scheduler_config.json: trained_betas has {} values but num_train_timesteps is {}; "
                      "make them agree",
                      trained.size(), n));
    }
    std::vector<float> f(trained.begin(), trained.end());
    betas = at::tensor(f, at::kFloat);
  } else {
    const std::string schedule = cfg.string("beta_schedule", "linear");
    const double start = cfg.number("beta_start", 0.0001);
    const double end = cfg.number("beta_end", 0.02);
    if (schedule == "linear") {
      betas = at::linspace(start, end, n, at::kFloat);
    } else if (schedule == "scaled_linear") {
      betas = at::linspace(std::pow(start, 0.5), std::pow(end, 0.5), n, at::kFloat).pow(2);
    } else if (schedule == "squaredcos_cap_v2") {
      betas = cosine_betas(n);
    } else {
      cfg.refuse("beta_schedule", "'" + schedule + "'", "linear, scaled_linear, squaredcos_cap_v2");
    }
  }
  const bool zero_snr = options.knows_zero_snr && cfg.boolean("rescale_betas_zero_snr", false);
  if (zero_snr) betas = rescale_zero_terminal_snr(betas);
  out.alphas_cumprod = at::cumprod(1.0 - betas, 0);
  // diffusers keeps the last sigma finite this way (scheduling_euler_discrete.py __init__).
  if (zero_snr && options.pins_last_alpha) out.alphas_cumprod[-1] = std::pow(2.0, -24);
  return out;
}

std::vector<float> training_sigmas(const at::Tensor& alphas_cumprod) {
  at::Tensor s = ((1 - alphas_cumprod) / alphas_cumprod).pow(0.5).contiguous();
  return std::vector<float>(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
}

namespace {

// Ref: numpy/_core/src/umath/loops_exponent_log.dispatch.c.src (simd_log_FLOAT) and the
// NPY_COEFF_*_LOGf constants of npy_simd_data.h; one lane, the same roundings (fmaf is the
// hardware FMA's single rounding).
float numpy_simd_logf(float x) {
  if (std::isnan(x)) return x;
  if (x < 0) return -std::numeric_limits<float>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<float>::infinity();
  if (std::isinf(x)) return x;
  constexpr float kP[6] = {0.000000000000000000000e+00f, 9.999999999999998702752e-01f, 2.112677543073053063722e+00f,
                           1.480000633576506585156e+00f, 3.808837741388407920751e-01f, 2.589979117907922693523e-02f};
  constexpr float kQ[6] = {1.000000000000000000000e+00f, 2.612677543073109236779e+00f, 2.453006071784736363091e+00f,
                           9.864942958519418960339e-01f, 1.546476374983906719538e-01f, 5.875095403124574342950e-03f};
  constexpr float kSqrtHalf = 0.707106781186547524400844362104849039f;
  constexpr float kLn2 = 0.693147180559945309417232121458176568f;
  float exp_shift = 0;
  if (x < std::numeric_limits<float>::min()) {  // denormal: scale by 2^100 first
    x *= 0x1p100f;
    exp_shift = 100;
  }
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  float exponent = static_cast<float>(static_cast<int32_t>(bits >> 23) - 126) - exp_shift;
  const uint32_t mant_bits = (bits & 0x7fffffu) | (126u << 23);  // mantissa in [0.5, 1)
  float m;
  std::memcpy(&m, &mant_bits, sizeof m);
  if (m <= kSqrtHalf) {
    m = m + m;
    exponent = exponent - 1.0f;
  }
  m = m - 1.0f;
  float num = std::fmaf(kP[5], m, kP[4]);
  for (int i = 3; i >= 0; --i) num = std::fmaf(num, m, kP[i]);
  float den = std::fmaf(kQ[5], m, kQ[4]);
  for (int i = 3; i >= 0; --i) den = std::fmaf(den, m, kQ[i]);
  return std::fmaf(exponent, kLn2, num / den);
}

}  // namespace

std::vector<float> log_f32(const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = numpy_simd_logf(values[i]);
  return out;
}

std::vector<double> np_linspace(double start, double stop, int64_t num) {
  std::vector<double> y(static_cast<size_t>(std::max<int64_t>(num, 0)));
  if (num <= 0) return y;
  const int64_t div = num - 1;
  const double delta = stop - start;
  if (div > 0) {
    const double step = delta / static_cast<double>(div);
    for (int64_t i = 0; i < num; ++i) {
      double v = static_cast<double>(i);
      v = step == 0 ? v / static_cast<double>(div) * delta : v * step;
      y[static_cast<size_t>(i)] = v + start;
    }
    y.back() = stop;
  } else {
    y[0] = 0.0 * delta + start;
  }
  return y;
}

std::vector<double> np_arange(double start, double stop, double step) {
  const double len_f = std::ceil((stop - start) / step);
  const int64_t len = len_f > 0 ? static_cast<int64_t>(len_f) : 0;
  std::vector<double> y(static_cast<size_t>(len));
  if (len == 0) return y;
  y[0] = start;
  if (len == 1) return y;
  y[1] = start + step;
  // numpy's DOUBLE_fill: every later value from the first two.
  const double delta = y[1] - y[0];
  for (int64_t i = 2; i < len; ++i) y[static_cast<size_t>(i)] = start + static_cast<double>(i) * delta;
  return y;
}

double np_round(double value) { return std::nearbyint(value); }

std::vector<double> np_interp(const std::vector<double>& x, const std::vector<float>& fp) {
  const int64_t n = static_cast<int64_t>(fp.size());
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    if (std::isnan(v)) {
      out[i] = v;
    } else if (v < 0.0) {
      out[i] = fp.front();
    } else if (v >= static_cast<double>(n - 1)) {
      out[i] = fp.back();
    } else {
      const auto j = static_cast<int64_t>(std::floor(v));
      const double dj = static_cast<double>(j);
      const double y0 = fp[static_cast<size_t>(j)];
      const double y1 = fp[static_cast<size_t>(j + 1)];
      if (dj == v) {
        out[i] = y0;
      } else {
        const double slope = (y1 - y0) / (dj + 1.0 - dj);
        double r = slope * (v - dj) + y0;
        if (std::isnan(r)) {
          r = slope * (v - (dj + 1.0)) + y1;
          if (std::isnan(r) && y0 == y1) r = y0;
        }
        out[i] = r;
      }
    }
  }
  return out;
}

double sigma_to_t(double sigma, const std::vector<float>& log_sigmas) {
  const double log_sigma = std::log(std::max(sigma, 1e-10));
  const int64_t n = static_cast<int64_t>(log_sigmas.size());
  // argmax(cumsum(dists >= 0)): the first index where the running count reaches its total.
  int64_t total = 0;
  for (float l : log_sigmas) total += (log_sigma - static_cast<double>(l)) >= 0 ? 1 : 0;
  int64_t low = 0, count = 0;
  if (total > 0) {
    for (int64_t j = 0; j < n; ++j) {
      count += (log_sigma - static_cast<double>(log_sigmas[static_cast<size_t>(j)])) >= 0 ? 1 : 0;
      if (count == total) {
        low = j;
        break;
      }
    }
  }
  low = std::min(low, n - 2);
  const float lo = log_sigmas[static_cast<size_t>(low)];
  const float hi = log_sigmas[static_cast<size_t>(low + 1)];
  // low - high is a float32 difference in numpy; the rest is float64.
  double w = (static_cast<double>(lo) - log_sigma) / static_cast<double>(lo - hi);
  if (!std::isnan(w)) w = std::clamp(w, 0.0, 1.0);
  return (1 - w) * static_cast<double>(low) + w * static_cast<double>(low + 1);
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t num) {
  constexpr double kRho = 7.0;
  const std::vector<double> ramp = np_linspace(0, 1, num);
  const double min_inv_rho = std::pow(sigma_min, 1 / kRho);
  const double max_inv_rho = std::pow(sigma_max, 1 / kRho);
  std::vector<double> out(ramp.size());
  for (size_t i = 0; i < ramp.size(); ++i) out[i] = std::pow(max_inv_rho + ramp[i] * (min_inv_rho - max_inv_rho), kRho);
  return out;
}

std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, int64_t num) {
  std::vector<double> out = np_linspace(std::log(sigma_max), std::log(sigma_min), num);
  for (double& v : out) v = std::exp(v);
  return out;
}

at::Tensor scalar_f32(double value) { return at::scalar_tensor(value, at::kFloat); }

at::Tensor at_index(const at::Tensor& values, int64_t index, const std::string& who, const char* what) {
  if (index < 0 || index >= values.size(0)) {
    throw Error(
        fmt::format("scheduler {}: index {} is outside its {} {} (diffusers fails on this schedule too); "
                    "use another step count or config",
                    who, index, values.size(0), what));
  }
  return values[index];
}

at::Tensor per_row_noise(const at::Tensor& like, at::ScalarType dtype, std::vector<at::Generator>& generators,
                         const std::string& who) {
  const int64_t batch = like.size(0);
  for (const at::Generator& g : generators) {
    if (!g.defined() || g.device().type() != at::kCPU) {
      throw Error(fmt::format("scheduler {}: step() needs CPU generators, got one on {}; pass CPU generators", who,
                              g.defined() ? g.device().str() : "nothing"));
    }
  }
  const auto cpu = at::TensorOptions().dtype(dtype).device(at::kCPU);
  if (generators.size() == 1) return at::randn(like.sizes(), generators[0], cpu).to(like.device());
  if (static_cast<int64_t>(generators.size()) != batch) {
    throw Error(
        fmt::format("scheduler {}: step() draws noise and needs one generator per batch row ({}), got {}; "
                    "pass {} generators",
                    who, batch, generators.size(), batch));
  }
  std::vector<int64_t> row_shape(like.sizes().begin(), like.sizes().end());
  row_shape[0] = 1;
  std::vector<at::Tensor> rows;
  rows.reserve(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) rows.push_back(at::randn(row_shape, generators[static_cast<size_t>(i)], cpu));
  return at::cat(rows, 0).to(like.device());
}

at::Tensor threshold_sample(const at::Tensor& sample, double ratio, double max_value) {
  const at::ScalarType dtype = sample.scalar_type();
  at::Tensor x = sample;
  // Quantiles need float32 or float64 (and clamp has no CPU half kernel).
  if (dtype != at::kFloat && dtype != at::kDouble) x = x.to(at::kFloat);
  const int64_t batch = x.size(0);
  x = x.reshape({batch, -1});
  at::Tensor s = at::quantile(x.abs(), ratio, 1);
  s = at::clamp(s, 1, max_value).unsqueeze(1);
  x = at::clamp(x, -s, s) / s;
  return x.reshape(sample.sizes()).to(dtype);
}

void check_step_order(int64_t step_index, int64_t expected, const std::string& who) {
  if (step_index != expected) {
    throw Error(
        fmt::format("scheduler {}: step() got step_index {} but expected {}; call set_timesteps() and then "
                    "step() with 0, 1, 2, ...",
                    who, step_index, expected));
  }
}

int64_t first_step_index(const at::Tensor& timesteps) {
  at::Tensor hits = (timesteps == timesteps[0]).nonzero();
  return hits.size(0) > 1 ? hits[1][0].item<int64_t>() : 0;
}

at::Tensor input_scale(const at::Tensor& sigma) { return (sigma.pow(2) + 1).pow(0.5); }

double sigma_space_init_noise_sigma(const at::Tensor& sigmas, Spacing spacing) {
  at::Tensor max_sigma = sigmas.max();
  if (spacing == Spacing::kLinspace || spacing == Spacing::kTrailing) return max_sigma.item<double>();
  return (max_sigma.pow(2) + 1).pow(0.5).item<double>();
}

at::Tensor sigma_space_v_to_x0(const at::Tensor& v, const at::Tensor& sample, const at::Tensor& sigma) {
  return v * (-sigma / (sigma.pow(2) + 1).pow(0.5)) + (sample / (sigma.pow(2) + 1));
}

std::pair<at::Tensor, at::Tensor> vp_alpha_sigma(const at::Tensor& sigma) {
  // Python's `1 / t` is t.reciprocal() * 1.
  at::Tensor alpha = (sigma.pow(2) + 1).pow(0.5).reciprocal();
  return {alpha, sigma * alpha};
}

at::Tensor float32_tensor(const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  return at::tensor(f, at::kFloat);
}

std::vector<float> discrete_timesteps(Spacing spacing, int64_t num_train_timesteps, int64_t steps,
                                      int64_t steps_offset) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(steps));
  const auto t_count = static_cast<double>(num_train_timesteps);
  switch (spacing) {
    case Spacing::kLinspace: {
      std::vector<double> v = np_linspace(0, t_count - 1, steps);
      for (auto it = v.rbegin(); it != v.rend(); ++it) out.push_back(static_cast<float>(*it));
      break;
    }
    case Spacing::kLeading: {
      const int64_t ratio = num_train_timesteps / steps;
      for (int64_t i = steps - 1; i >= 0; --i) {
        out.push_back(static_cast<float>(i * ratio) + static_cast<float>(steps_offset));
      }
      break;
    }
    case Spacing::kTrailing: {
      for (double v : np_arange(t_count, 0, -(t_count / static_cast<double>(steps)))) {
        out.push_back(static_cast<float>(np_round(v)) - 1.0f);
      }
      break;
    }
  }
  return out;
}

// Ref: diffusers DDPMScheduler.add_noise (PNDM's and DDIM's are copies).
at::Tensor alphas_add_noise(const at::Tensor& alphas_cumprod, int64_t t, const at::Tensor& original,
                            const at::Tensor& noise, const std::string& who) {
  at::Tensor acp = at_index(alphas_cumprod.to(original.scalar_type()), t, who, "training timesteps").to(original.device());
  at::Tensor sqrt_alpha = acp.pow(0.5);
  at::Tensor sqrt_one_minus = (1 - acp).pow(0.5);
  return sqrt_alpha * original + sqrt_one_minus * noise;
}

// Ref: diffusers EulerDiscreteScheduler.add_noise (EulerAncestral's and LMS's are copies).
at::Tensor sigma_add_noise(const at::Tensor& sigmas, int64_t index, const at::Tensor& original, const at::Tensor& noise,
                           const std::string& who) {
  at::Tensor sigma = at_index(sigmas.to(original.scalar_type()), index, who, "noise levels").to(original.device());
  return original + noise * sigma;
}

// Ref: diffusers DPMSolverMultistepScheduler.add_noise and _sigma_to_alpha_sigma_t (UniPC's are copies).
at::Tensor vp_add_noise(const at::Tensor& sigmas, int64_t index, const at::Tensor& original, const at::Tensor& noise,
                        const std::string& who) {
  at::Tensor sigma = at_index(sigmas.to(original.scalar_type()), index, who, "noise levels").to(original.device());
  at::Tensor alpha_t = 1 / (sigma.pow(2) + 1).pow(0.5);
  at::Tensor sigma_t = sigma * alpha_t;
  return alpha_t * original + sigma_t * noise;
}

// Ref: diffusers FlowMatchEulerDiscreteScheduler.scale_noise.
at::Tensor flow_scale_noise(const at::Tensor& sigmas, int64_t index, const at::Tensor& original,
                            const at::Tensor& noise, const std::string& who) {
  at::Tensor sigma = at_index(sigmas.to(original.scalar_type()), index, who, "noise levels").to(original.device());
  return sigma * noise + (1.0 - sigma) * original;
}

}  // namespace dpinfer::pipeline::schedulers

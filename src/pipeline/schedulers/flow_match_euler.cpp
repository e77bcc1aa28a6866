// Ref: diffusers/schedulers/scheduling_flow_match_euler_discrete.py (FlowMatchEulerDiscreteScheduler),
//      diffusers/pipelines/flux/pipeline_flux.py (calculate_shift, the sigmas FluxPipeline passes),
//      diffusers/pipelines/flux2/pipeline_flux2.py (compute_empirical_mu).
// diffusers mixes three kinds of arithmetic here, and each is kept: torch float32 in __init__
// and after set_timesteps' numpy part (ATen ops, the same kernels), numpy float64 when the
// scheduler spaces its own timesteps, and numpy float32 when the pipeline passes sigmas
// (np.array(sigmas).astype(np.float32), with Python floats cast to float32 as NEP 50 does).
// This file is built with -ffp-contract=off: a fused multiply-add would round differently.
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "dpinfer/pipeline/schedulers/flow_match.h"
#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline {

double calculate_shift(int64_t image_seq_len, double base_seq_len, double max_seq_len, double base_shift,
                       double max_shift) {
  const double m = (max_shift - base_shift) / (max_seq_len - base_seq_len);
  const double b = base_shift - m * base_seq_len;
  return static_cast<double>(image_seq_len) * m + b;
}

double calculate_shift(int64_t image_seq_len, const nlohmann::json& scheduler_config) {
  const schedulers::ConfigReader cfg(scheduler_config, "flow_match_euler");
  return calculate_shift(image_seq_len, cfg.number("base_image_seq_len", 256), cfg.number("max_image_seq_len", 4096),
                         cfg.number("base_shift", 0.5), cfg.number("max_shift", 1.15));
}

double compute_empirical_mu(int64_t image_seq_len, int64_t num_steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333;
  const double a2 = 0.00016927, b2 = 0.45666666;
  const auto seq = static_cast<double>(image_seq_len);
  if (image_seq_len > 4300) return a2 * seq + b2;
  const double m_200 = a2 * seq + b2;
  const double m_10 = a1 * seq + b1;
  const double a = (m_200 - m_10) / 190.0;
  const double b = m_200 - 200.0 * a;
  return a * static_cast<double>(num_steps) + b;
}

std::vector<double> flow_match_linear_sigmas(int64_t steps) {
  if (steps < 1) throw Error(fmt::format("flow-matching sigmas need at least 1 step, got {}", steps));
  return schedulers::np_linspace(1.0, 1.0 / static_cast<double>(steps), steps);
}

namespace schedulers {
namespace {

class FlowMatchEulerScheduler final : public Scheduler {
 public:
  explicit FlowMatchEulerScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        num_train_timesteps_(cfg.positive("num_train_timesteps", 1000)),
        shift_(cfg.number("shift", 1.0)),
        dynamic_(cfg.boolean("use_dynamic_shifting", false)),
        invert_(cfg.boolean("invert_sigmas", false)),
        shift_terminal_(cfg.optional_number("shift_terminal")),
        karras_(cfg.boolean("use_karras_sigmas", false)),
        exponential_(cfg.boolean("use_exponential_sigmas", false)),
        // Not FlowMatchEulerDiscreteScheduler's own keys, but from_config keeps any key of the
        // file in the config, and its Karras and exponential spacings read them from there.
        config_sigma_min_(cfg.optional_number("sigma_min")),
        config_sigma_max_(cfg.optional_number("sigma_max")) {
    cfg.require_false("use_beta_sigmas", "beta sigmas (scipy.stats.beta.ppf)");
    // diffusers draws this noise with torch.randn_like, from torch's global generator rather
    // than the pipeline's, so no per-image seed could reproduce it.
    cfg.require_false("stochastic_sampling",
                      "stochastic sampling, whose noise diffusers draws from torch's global generator");
    if (karras_ && exponential_) {
      cfg.refuse("use_karras_sigmas", "true with use_exponential_sigmas true", "at most one of them");
    }
    const std::string time_shift = cfg.string("time_shift_type", "exponential");
    if (time_shift != "exponential" && time_shift != "linear") {
      cfg.refuse("time_shift_type", "'" + time_shift + "'", "exponential, linear");
    }
    linear_time_shift_ = time_shift == "linear";
    if (!std::isfinite(shift_)) cfg.refuse("shift", fmt::format("{}", shift_), "a finite number");

    // __init__: the training sigmas, shifted here unless the shift is dynamic (torch float32).
    const int64_t t_count = num_train_timesteps_;
    const std::vector<double> lin = np_linspace(1, static_cast<double>(t_count), t_count);
    std::vector<float> descending(lin.rbegin(), lin.rend());
    at::Tensor sigmas = at::tensor(descending, at::kFloat) / t_count;
    if (!dynamic_) sigmas = shift_ * sigmas / (1 + (shift_ - 1) * sigmas);
    sigma_min_ = sigmas[-1].item<double>();
    sigma_max_ = sigmas[0].item<double>();
  }

  void set_timesteps(const TimestepRequest& request) override {
    if (dynamic_ && !request.mu) {
      throw Error(fmt::format(
          "scheduler {}: the scheduler config sets use_dynamic_shifting, so set_timesteps() needs mu "
          "(calculate_shift of the image size), and none was given",
          who_));
    }
    if (request.mu && !std::isfinite(*request.mu)) {
      throw Error(fmt::format("scheduler {}: mu must be a finite number, got {}", who_, *request.mu));
    }
    const bool custom = !request.sigmas.empty();
    const auto given = static_cast<int64_t>(request.sigmas.size());
    if (custom && request.steps != 0 && request.steps != given) {
      throw Error(fmt::format("scheduler {}: {} sigmas were given for {} steps; give one sigma per step", who_, given,
                              request.steps));
    }
    const int64_t n = custom ? given : request.steps;
    if (n < 1) throw Error(fmt::format("scheduler {}: num_inference_steps must be at least 1, got {}", who_, n));

    std::vector<double> sig;
    if (custom) {
      // np.array(sigmas).astype(np.float32): numpy float32 from here on.
      std::vector<float> s(request.sigmas.begin(), request.sigmas.end());
      shift(s, request.mu.value_or(0.0));
      sig.assign(s.begin(), s.end());
    } else {
      // np.linspace(sigma_max * T, sigma_min * T, n) / T: numpy float64. SD3 shifts its
      // already shifted training range a second time here, as diffusers does.
      const double lo = request.sigma_min.value_or(sigma_min_);
      const auto t_count = static_cast<double>(num_train_timesteps_);
      sig = np_linspace(sigma_max_ * t_count, lo * t_count, n);
      for (double& v : sig) v = v / t_count;
      shift(sig, request.mu.value_or(0.0));
    }
    if (karras_ || exponential_) {
      const double lo = config_sigma_min_.value_or(sig.back());
      const double hi = config_sigma_max_.value_or(sig.front());
      sig = karras_ ? karras_sigmas(lo, hi, n) : exponential_sigmas(lo, hi, n);
    }

    at::Tensor sigmas = float32_tensor(sig);
    at::Tensor timesteps = sigmas * num_train_timesteps_;
    if (invert_) {
      // Mochi's convention: inverted sigmas, the timesteps from them, a final 1.
      sigmas = 1.0 - sigmas;
      timesteps = sigmas * num_train_timesteps_;
      sigmas = at::cat({sigmas, at::ones({1}, at::kFloat)});
    } else {
      sigmas = at::cat({sigmas, at::zeros({1}, at::kFloat)});
    }
    if (!at::isfinite(sigmas).all().item<bool>()) {
      throw Error(fmt::format("scheduler {}: the sigmas for {} steps are not finite (diffusers gets NaN here too); "
                              "use other steps or another config",
                              who_, n));
    }
    timesteps_ = timesteps;
    sigmas_ = sigmas;
    begin_ = first_step_index(timesteps_);
    start_ = 0;
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  double init_noise_sigma() const override { return 1.0; }

  at::Tensor scale_model_input(const at::Tensor& sample, int64_t /*step_index*/) const override { return sample; }

  at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample_in,
                  std::vector<at::Generator>& /*generators*/) override {
    if (!sigmas_.defined()) throw Error("scheduler " + who_ + ": call set_timesteps() before using it");
    const int64_t idx = begin_ + step_index;
    // The sample is upcast; dt * model_output stays in model_output's dtype (a 0-d tensor
    // does not promote), and the sum is float32 until the cast back, as in diffusers.
    at::Tensor sample = sample_in.to(at::kFloat);
    at::Tensor dt = at_index(sigmas_, idx + 1, who_, "noise levels") - at_index(sigmas_, idx, who_, "noise levels");
    at::Tensor prev = sample + dt * model_output;
    return prev.to(model_output.scalar_type());
  }

  void set_begin_index(int64_t begin) override {
    begin_ = begin;  // diffusers: step_index = begin_index on the first step, not index_for_timestep
    start_ = begin;
  }
  int64_t begin_index() const override { return start_; }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, int64_t position) const override {
    return flow_scale_noise(sigmas_, position, original, noise, who_);
  }

  std::string name() const override { return who_; }
  bool needs_generator() const override { return false; }

 private:
  // Steps 2 and 3 of set_timesteps: the static or dynamic shift, then the optional stretch to
  // shift_terminal, in T = float (numpy float32) or double (numpy float64); a Python float
  // meeting a float32 array is cast to float32 first.
  template <typename T>
  void shift(std::vector<T>& s, double mu) const {
    if (dynamic_) {
      // time_shift(mu, 1.0, t): e^mu / (e^mu + (1 / t - 1) ** 1.0), or mu / (mu + ...) when linear.
      const auto m = static_cast<T>(linear_time_shift_ ? mu : std::exp(mu));
      for (T& v : s) {
        const T r = T(1) / v - T(1);
        v = m / (m + r);
      }
    } else {
      const auto a = static_cast<T>(shift_);
      const auto b = static_cast<T>(shift_ - 1);
      for (T& v : s) v = a * v / (T(1) + b * v);
    }
    // `if self.config.shift_terminal:`, so 0 is off like None.
    if (shift_terminal_ && *shift_terminal_ != 0) {
      const T last = T(1) - s.back();
      if (last == T(0)) {
        throw Error(fmt::format(
            "scheduler {}: shift_terminal {} cannot stretch a schedule whose last sigma is 1 (1 step; diffusers "
            "divides by zero and gets NaN sigmas); use 2 or more steps",
            who_, *shift_terminal_));
      }
      const T scale = last / static_cast<T>(1 - *shift_terminal_);
      for (T& v : s) v = T(1) - (T(1) - v) / scale;
    }
  }

  std::string who_;
  int64_t num_train_timesteps_;
  double shift_;
  bool dynamic_;
  bool invert_;
  std::optional<double> shift_terminal_;
  bool karras_;
  bool exponential_;
  std::optional<double> config_sigma_min_;
  std::optional<double> config_sigma_max_;
  bool linear_time_shift_ = false;
  double sigma_min_ = 0;
  double sigma_max_ = 1;

  at::Tensor timesteps_;
  at::Tensor sigmas_;
  int64_t begin_ = 0;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
};

}  // namespace

std::unique_ptr<Scheduler> make_flow_match_euler(const ConfigReader& cfg) {
  return std::make_unique<FlowMatchEulerScheduler>(cfg);
}

}  // namespace schedulers
}  // namespace dpinfer::pipeline

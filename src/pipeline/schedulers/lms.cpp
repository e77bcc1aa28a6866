// Ref: diffusers/schedulers/scheduling_lms_discrete.py (LMSDiscreteScheduler)
#include <algorithm>
#include <deque>

#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

constexpr int64_t kLmsOrder = 4;

// QUADPACK's 21-point Gauss-Kronrod rule (dqk21): abscissae and Kronrod weights, in its order.
constexpr double kXgk[11] = {0.995657163025808080735527280689003,
                             0.973906528517171720077964012084452,
                             0.930157491355708226001207180059508,
                             0.865063366688984510732096688423493,
                             0.780817726586416897063717578345042,
                             0.679409568299024406234327365114874,
                             0.562757134668604683339000099272694,
                             0.433395394129247190799265943165784,
                             0.294392862701460198131126603103866,
                             0.148874338981631210884826001129720,
                             0.0};
constexpr double kWgk[11] = {
    0.011694638867371874278064396062192, 0.032558162307964727478818972459390, 0.054755896574351996031381300244580,
    0.075039674810919952767043140916190, 0.093125454583697605535065465083366, 0.109387158802297641899210590325805,
    0.123491976262065851077996615966393, 0.134709217311473325928054001771707, 0.142775938577060080797094273138717,
    0.147739104901338491374841515972068, 0.149445554002916905664936468389821};

class LmsScheduler final : public Scheduler {
 public:
  explicit LmsScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/false, /*pins_last_alpha=*/false})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction, Prediction::kSample})),
        spacing_(read_spacing(cfg, Spacing::kLinspace)),
        steps_offset_(cfg.integer("steps_offset", 0)),
        karras_(cfg.boolean("use_karras_sigmas", false)),
        exponential_(cfg.boolean("use_exponential_sigmas", false)),
        // Read with hasattr(self.config, ...) by the exponential conversion only.
        sigma_min_(cfg.optional_number("sigma_min")),
        sigma_max_(cfg.optional_number("sigma_max")) {
    cfg.require_false("use_beta_sigmas", "beta sigmas");
    if (karras_ && exponential_) {
      cfg.refuse("use_karras_sigmas", "true with use_exponential_sigmas true", "at most one of them");
    }
  }

  void set_timesteps(const TimestepRequest& request) override {
    const int64_t num_inference_steps = schedulers::step_count(request, who_);
    if (num_inference_steps < 1) {
      throw Error(
          fmt::format("scheduler {}: num_inference_steps must be at least 1, got {}", who_, num_inference_steps));
    }
    const int64_t n = num_inference_steps;
    std::vector<float> ts_f32 = discrete_timesteps(spacing_, schedule_.num_train_timesteps, n, steps_offset_);
    std::vector<double> ts(ts_f32.begin(), ts_f32.end());
    const std::vector<float> base = training_sigmas(schedule_.alphas_cumprod);
    const std::vector<float> log_sigmas = log_f32(base);
    std::vector<double> sig = np_interp(ts, base);
    if (karras_) sig = karras_sigmas(sig.back(), sig.front(), n);
    if (exponential_) sig = exponential_sigmas(sigma_min_.value_or(sig.back()), sigma_max_.value_or(sig.front()), n);
    if (karras_ || exponential_) {
      ts.clear();
      for (double s : sig) ts.push_back(static_cast<float>(sigma_to_t(s, log_sigmas)));
    }
    sig.push_back(0.0);
    sigmas_ = float32_tensor(sig);
    sigma_values_.assign(sigmas_.data_ptr<float>(), sigmas_.data_ptr<float>() + sigmas_.numel());
    timesteps_ = float32_tensor(ts);
    begin_ = first_step_index(timesteps_);
    start_ = 0;
    init_noise_sigma_ = sigma_space_init_noise_sigma(sigmas_, spacing_);
    derivatives_.clear();
    calls_ = 0;
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  double init_noise_sigma() const override { return init_noise_sigma_; }

  at::Tensor scale_model_input(const at::Tensor& sample, int64_t step_index) const override {
    ensure_ready();
    return sample / input_scale(at_index(sigmas_, begin_ + step_index, who_, "noise levels"));
  }

  at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample,
                  std::vector<at::Generator>& /*generators*/) override {
    ensure_ready();
    check_step_order(step_index, calls_, who_);
    const int64_t idx = begin_ + step_index;
    at::Tensor sigma = at_index(sigmas_, idx, who_, "noise levels");
    at_index(sigmas_, idx + 1, who_, "noise levels");
    at::Tensor x0;
    switch (prediction_) {
      case Prediction::kEpsilon:
        x0 = sample - sigma * model_output;
        break;
      case Prediction::kVPrediction:
        x0 = sigma_space_v_to_x0(model_output, sample, sigma);
        break;
      case Prediction::kSample:
        x0 = model_output;
        break;
    }
    derivatives_.push_back((sample - x0) / sigma);
    if (static_cast<int64_t>(derivatives_.size()) > kLmsOrder) derivatives_.pop_front();
    const int64_t order = std::min(idx + 1, kLmsOrder);
    // sum(coeff * derivative for coeff, derivative in zip(coeffs, reversed(derivatives))).
    const int64_t terms = std::min<int64_t>(order, static_cast<int64_t>(derivatives_.size()));
    at::Tensor sum;
    for (int64_t k = 0; k < terms; ++k) {
      at::Tensor term = derivatives_[derivatives_.size() - 1 - static_cast<size_t>(k)] * coefficient(order, idx, k);
      sum = sum.defined() ? sum + term : term;
    }
    ++calls_;
    return sample + sum;
  }

  void set_begin_index(int64_t begin) override {
    begin_ = begin;  // diffusers: step_index = begin_index on the first step, not index_for_timestep
    start_ = begin;
  }
  int64_t begin_index() const override { return start_; }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, int64_t position) const override {
    return sigma_add_noise(sigmas_, position, original, noise, who_);
  }

  std::string name() const override { return who_; }
  bool needs_generator() const override { return false; }

 private:
  void ensure_ready() const {
    if (!sigmas_.defined()) throw Error("scheduler " + who_ + ": call set_timesteps() before using it");
  }

  // Ref: get_lms_coefficient. diffusers integrates the Lagrange basis polynomial with
  // scipy.integrate.quad(epsrel=1e-4), which for a polynomial of degree <= 3 stops after one
  // 21-point Gauss-Kronrod pass; the integrand is evaluated in float32 torch arithmetic.
  double coefficient(int64_t order, int64_t t, int64_t current) const {
    auto integrand = [&](double tau) -> double {
      const auto tau_f = static_cast<float>(tau);
      float prod = 1.0f;
      for (int64_t k = 0; k < order; ++k) {
        if (k == current) continue;
        const float s_k = sigma_values_[static_cast<size_t>(t - k)];
        const float s_c = sigma_values_[static_cast<size_t>(t - current)];
        prod *= (tau_f - s_k) / (s_c - s_k);
      }
      return prod;
    };
    const double a = sigma_values_[static_cast<size_t>(t)];
    const double b = sigma_values_[static_cast<size_t>(t + 1)];
    const double centr = 0.5 * (a + b);
    const double hlgth = 0.5 * (b - a);
    double resk = kWgk[10] * integrand(centr);
    for (int j = 1; j < 10; j += 2) {
      const double absc = hlgth * kXgk[j];
      resk += kWgk[j] * (integrand(centr - absc) + integrand(centr + absc));
    }
    for (int j = 0; j < 10; j += 2) {
      const double absc = hlgth * kXgk[j];
      resk += kWgk[j] * (integrand(centr - absc) + integrand(centr + absc));
    }
    return resk * hlgth;
  }

  std::string who_;
  NoiseSchedule schedule_;
  Prediction prediction_;
  Spacing spacing_;
  int64_t steps_offset_;
  bool karras_;
  bool exponential_;
  std::optional<double> sigma_min_;
  std::optional<double> sigma_max_;

  at::Tensor timesteps_;
  at::Tensor sigmas_;
  std::vector<float> sigma_values_;
  int64_t begin_ = 0;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  double init_noise_sigma_ = 1.0;
  std::deque<at::Tensor> derivatives_;
  int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_lms(const ConfigReader& cfg) { return std::make_unique<LmsScheduler>(cfg); }

}  // namespace dpinfer::pipeline::schedulers

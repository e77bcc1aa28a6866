// Ref: diffusers/schedulers/scheduling_dpmsolver_multistep.py (DPMSolverMultistepScheduler)
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

struct VpPoint {
  at::Tensor alpha, sigma, lambda;
};

class DpmSolverMultistepScheduler final : public Scheduler {
 public:
  explicit DpmSolverMultistepScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/true, /*pins_last_alpha=*/true})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction, Prediction::kSample})),
        spacing_(read_spacing(cfg, Spacing::kLinspace)),
        steps_offset_(cfg.integer("steps_offset", 0)),
        solver_order_(cfg.integer("solver_order", 2)),
        thresholding_(cfg.boolean("thresholding", false)),
        dynamic_thresholding_ratio_(cfg.number("dynamic_thresholding_ratio", 0.995)),
        sample_max_value_(cfg.number("sample_max_value", 1.0)),
        lower_order_final_(cfg.boolean("lower_order_final", true)),
        euler_at_final_(cfg.boolean("euler_at_final", false)),
        karras_(cfg.boolean("use_karras_sigmas", false)),
        exponential_(cfg.boolean("use_exponential_sigmas", false)),
        lambda_min_clipped_(cfg.number("lambda_min_clipped", -std::numeric_limits<double>::infinity())),
        cosine_betas_(cfg.string("beta_schedule", "linear") == "squaredcos_cap_v2"),
        // diffusers reads these with hasattr(self.config, ...): any key the file carries counts.
        sigma_min_(cfg.optional_number("sigma_min")),
        sigma_max_(cfg.optional_number("sigma_max")) {
    if (solver_order_ < 1 || solver_order_ > 3) cfg.refuse("solver_order", std::to_string(solver_order_), "1, 2, 3");
    const std::string algorithm = cfg.string("algorithm_type", "dpmsolver++");
    if (algorithm == "dpmsolver++" || algorithm == "deis") {
      sde_ = false;  // diffusers maps deis to dpmsolver++
    } else if (algorithm == "sde-dpmsolver++") {
      sde_ = true;
    } else {
      cfg.refuse("algorithm_type", "'" + algorithm + "'", "dpmsolver++, sde-dpmsolver++");
    }
    const std::string solver_type = cfg.string("solver_type", "midpoint");
    if (solver_type == "heun") {
      heun_ = true;
    } else if (solver_type != "midpoint" && solver_type != "logrho" && solver_type != "bh1" && solver_type != "bh2") {
      cfg.refuse("solver_type", "'" + solver_type + "'", "midpoint, heun");
    }
    const std::string final_type = cfg.string("final_sigmas_type", "zero");
    if (final_type != "zero" && final_type != "sigma_min") {
      cfg.refuse("final_sigmas_type", "'" + final_type + "'", "zero, sigma_min");
    }
    final_zero_ = final_type == "zero";
    if (cfg.has("variance_type")) {
      cfg.refuse("variance_type", "'" + cfg.string("variance_type", "") + "'",
                 "null (learned variance is not implemented)");
    }
    cfg.require_false("use_beta_sigmas", "beta sigmas");
    cfg.require_false("use_lu_lambdas", "lu lambdas");
    cfg.require_false("use_flow_sigmas", "flow sigmas");
    if (karras_ && exponential_) {
      cfg.refuse("use_karras_sigmas", "true with use_exponential_sigmas true", "at most one of them");
    }
  }

  void set_timesteps(const TimestepRequest& request) override {
    const int64_t num_inference_steps = schedulers::step_count(request, who_);
    const int64_t t_count = schedule_.num_train_timesteps;
    if (num_inference_steps < 1) {
      throw Error(
          fmt::format("scheduler {}: num_inference_steps must be at least 1, got {}", who_, num_inference_steps));
    }
    const int64_t n = num_inference_steps;
    int64_t last = t_count;
    if (std::isfinite(lambda_min_clipped_)) {
      at::Tensor alpha_t = at::sqrt(schedule_.alphas_cumprod);
      at::Tensor sigma_t = at::sqrt(1 - schedule_.alphas_cumprod);
      at::Tensor lambda_t = at::log(alpha_t) - at::log(sigma_t);
      last = t_count - at::searchsorted(at::flip(lambda_t, {0}), lambda_min_clipped_).item<int64_t>();
    }
    std::vector<double> ts;
    switch (spacing_) {
      case Spacing::kLinspace: {
        std::vector<double> v = np_linspace(0, static_cast<double>(last - 1), n + 1);
        for (auto it = v.rbegin(); it + 1 != v.rend(); ++it) ts.push_back(np_round(*it));
        break;
      }
      case Spacing::kLeading: {
        const int64_t ratio = last / (n + 1);
        for (int64_t i = n; i >= 1; --i) ts.push_back(static_cast<double>(i * ratio + steps_offset_));
        break;
      }
      case Spacing::kTrailing:
        for (double v : np_arange(static_cast<double>(last), 0, -(static_cast<double>(t_count) / n))) {
          ts.push_back(np_round(v) - 1);
        }
        break;
    }
    const std::vector<float> base = training_sigmas(schedule_.alphas_cumprod);
    const std::vector<float> log_sigmas = log_f32(base);
    std::vector<double> sig;
    if (karras_ || exponential_) {
      // From the flipped (descending) training sigmas.
      const double lo = sigma_min_.value_or(base.front());
      const double hi = sigma_max_.value_or(base.back());
      sig = karras_ ? karras_sigmas(lo, hi, n) : exponential_sigmas(lo, hi, n);
      ts.clear();
      for (double s : sig) {
        const double t = sigma_to_t(s, log_sigmas);
        ts.push_back(karras_ && !cosine_betas_ ? np_round(t) : t);
      }
    } else {
      sig = np_interp(ts, base);
    }
    at::Tensor acp0 = schedule_.alphas_cumprod[0];
    sig.push_back(final_zero_ ? 0.0 : ((1 - acp0) / acp0).pow(0.5).item<double>());
    sigmas_ = float32_tensor(sig);
    std::vector<int64_t> ts_int;
    for (double t : ts) ts_int.push_back(static_cast<int64_t>(t));  // torch's .to(int64) truncates
    timesteps_ = at::tensor(ts_int, at::kLong);

    begin_ = first_step_index(timesteps_);
    start_ = 0;
    model_outputs_.assign(static_cast<size_t>(solver_order_), at::Tensor());
    lower_order_nums_ = 0;
    calls_ = 0;
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  double init_noise_sigma() const override { return 1.0; }
  at::Tensor scale_model_input(const at::Tensor& sample, int64_t /*step_index*/) const override { return sample; }

  at::Tensor step(const at::Tensor& model_output_in, int64_t step_index, const at::Tensor& sample_in,
                  std::vector<at::Generator>& generators) override {
    if (!sigmas_.defined()) throw Error("scheduler " + who_ + ": call set_timesteps() before step()");
    check_step_order(step_index, calls_, who_);
    const int64_t idx = begin_ + step_index;
    const int64_t n = timesteps_.size(0);
    const bool lower_order_final = idx == n - 1 && (euler_at_final_ || (lower_order_final_ && n < 15) || final_zero_);
    const bool lower_order_second = idx == n - 2 && lower_order_final_ && n < 15;

    at::Tensor model_output = convert_model_output(model_output_in, sample_in, idx);
    for (int64_t i = 0; i + 1 < solver_order_; ++i) model_outputs_[i] = model_outputs_[i + 1];
    model_outputs_.back() = model_output;

    at::Tensor sample = sample_in.to(at::kFloat);
    at::Tensor noise;
    if (sde_) noise = per_row_noise(model_output, at::kFloat, generators, who_);

    at::Tensor prev;
    if (solver_order_ == 1 || lower_order_nums_ < 1 || lower_order_final) {
      prev = first_order(model_output, sample, noise, idx);
    } else if (solver_order_ == 2 || lower_order_nums_ < 2 || lower_order_second) {
      prev = second_order(sample, noise, idx);
    } else {
      prev = third_order(sample, noise, idx);
    }
    if (lower_order_nums_ < solver_order_) ++lower_order_nums_;
    ++calls_;
    return prev.to(model_output.scalar_type());
  }

  void set_begin_index(int64_t begin) override {
    begin_ = begin;  // diffusers: step_index = begin_index on the first step, not index_for_timestep
    start_ = begin;
  }
  int64_t begin_index() const override { return start_; }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, int64_t position) const override {
    return vp_add_noise(sigmas_, position, original, noise, who_);
  }

  std::string name() const override { return who_; }
  bool needs_generator() const override { return sde_; }

 private:
  VpPoint point(int64_t index) const {
    auto [alpha, sigma] = vp_alpha_sigma(at_index(sigmas_, index, who_, "noise levels"));
    at::Tensor lambda = at::log(alpha) - at::log(sigma);
    return {alpha, sigma, lambda};
  }

  // The data prediction x0 (dpmsolver++ works on x0).
  at::Tensor convert_model_output(const at::Tensor& model_output, const at::Tensor& sample, int64_t idx) const {
    at::Tensor x0;
    if (prediction_ == Prediction::kSample) {
      x0 = model_output;
    } else {
      auto [alpha_t, sigma_t] = vp_alpha_sigma(at_index(sigmas_, idx, who_, "noise levels"));
      x0 = prediction_ == Prediction::kEpsilon ? (sample - sigma_t * model_output) / alpha_t
                                               : alpha_t * sample - sigma_t * model_output;
    }
    if (thresholding_) x0 = threshold_sample(x0, dynamic_thresholding_ratio_, sample_max_value_);
    return x0;
  }

  at::Tensor noise_term(const VpPoint& t, const at::Tensor& h, const at::Tensor& noise) const {
    return t.sigma * at::sqrt(1.0 - at::exp(-2 * h)) * noise;
  }

  at::Tensor first_order(const at::Tensor& model_output, const at::Tensor& sample, const at::Tensor& noise,
                         int64_t idx) const {
    const VpPoint t = point(idx + 1), s = point(idx);
    at::Tensor h = t.lambda - s.lambda;
    if (!sde_) return (t.sigma / s.sigma) * sample - (t.alpha * (at::exp(-h) - 1.0)) * model_output;
    return (t.sigma / s.sigma * at::exp(-h)) * sample + (t.alpha * (1 - at::exp(-2.0 * h))) * model_output +
           noise_term(t, h, noise);
  }

  at::Tensor second_order(const at::Tensor& sample, const at::Tensor& noise, int64_t idx) const {
    const VpPoint t = point(idx + 1), s0 = point(idx), s1 = point(idx - 1);
    const at::Tensor& m0 = model_outputs_[model_outputs_.size() - 1];
    const at::Tensor& m1 = model_outputs_[model_outputs_.size() - 2];
    at::Tensor h = t.lambda - s0.lambda;
    at::Tensor h_0 = s0.lambda - s1.lambda;
    at::Tensor r0 = h_0 / h;
    const at::Tensor& d0 = m0;
    at::Tensor d1 = r0.reciprocal() * (m0 - m1);
    if (!sde_) {
      at::Tensor base = (t.sigma / s0.sigma) * sample - (t.alpha * (at::exp(-h) - 1.0)) * d0;
      if (!heun_) return base - 0.5 * (t.alpha * (at::exp(-h) - 1.0)) * d1;
      return base + (t.alpha * ((at::exp(-h) - 1.0) / h + 1.0)) * d1;
    }
    at::Tensor base = (t.sigma / s0.sigma * at::exp(-h)) * sample + (t.alpha * (1 - at::exp(-2.0 * h))) * d0;
    if (!heun_)
      base = base + 0.5 * (t.alpha * (1 - at::exp(-2.0 * h))) * d1;
    else
      base = base + (t.alpha * ((1.0 - at::exp(-2.0 * h)) / (-2.0 * h) + 1.0)) * d1;
    return base + noise_term(t, h, noise);
  }

  at::Tensor third_order(const at::Tensor& sample, const at::Tensor& noise, int64_t idx) const {
    const VpPoint t = point(idx + 1), s0 = point(idx), s1 = point(idx - 1), s2 = point(idx - 2);
    const size_t k = model_outputs_.size();
    const at::Tensor& m0 = model_outputs_[k - 1];
    const at::Tensor& m1 = model_outputs_[k - 2];
    const at::Tensor& m2 = model_outputs_[k - 3];
    at::Tensor h = t.lambda - s0.lambda, h_0 = s0.lambda - s1.lambda, h_1 = s1.lambda - s2.lambda;
    at::Tensor r0 = h_0 / h, r1 = h_1 / h;
    const at::Tensor& d0 = m0;
    at::Tensor d1_0 = r0.reciprocal() * (m0 - m1);
    at::Tensor d1_1 = r1.reciprocal() * (m1 - m2);
    at::Tensor d1 = d1_0 + (r0 / (r0 + r1)) * (d1_0 - d1_1);
    at::Tensor d2 = (r0 + r1).reciprocal() * (d1_0 - d1_1);
    if (!sde_) {
      return (t.sigma / s0.sigma) * sample - (t.alpha * (at::exp(-h) - 1.0)) * d0 +
             (t.alpha * ((at::exp(-h) - 1.0) / h + 1.0)) * d1 -
             (t.alpha * ((at::exp(-h) - 1.0 + h) / h.pow(2) - 0.5)) * d2;
    }
    return (t.sigma / s0.sigma * at::exp(-h)) * sample + (t.alpha * (1.0 - at::exp(-2.0 * h))) * d0 +
           (t.alpha * ((1.0 - at::exp(-2.0 * h)) / (-2.0 * h) + 1.0)) * d1 +
           (t.alpha * ((1.0 - at::exp(-2.0 * h) - 2.0 * h) / (2.0 * h).pow(2) - 0.5)) * d2 + noise_term(t, h, noise);
  }

  std::string who_;
  NoiseSchedule schedule_;
  Prediction prediction_;
  Spacing spacing_;
  int64_t steps_offset_;
  int64_t solver_order_;
  bool thresholding_;
  double dynamic_thresholding_ratio_;
  double sample_max_value_;
  bool lower_order_final_;
  bool euler_at_final_;
  bool karras_;
  bool exponential_;
  double lambda_min_clipped_;
  bool cosine_betas_;
  std::optional<double> sigma_min_;
  std::optional<double> sigma_max_;
  bool sde_ = false;
  bool heun_ = false;
  bool final_zero_ = true;

  at::Tensor timesteps_;
  at::Tensor sigmas_;
  int64_t begin_ = 0;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  std::vector<at::Tensor> model_outputs_;
  int64_t lower_order_nums_ = 0;
  int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_dpm_solver_multistep(const ConfigReader& cfg) {
  return std::make_unique<DpmSolverMultistepScheduler>(cfg);
}

}  // namespace dpinfer::pipeline::schedulers

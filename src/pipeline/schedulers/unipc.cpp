// Ref: diffusers/schedulers/scheduling_unipc_multistep.py (UniPCMultistepScheduler)
#include <algorithm>

#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

struct UniPcVpPoint {
  at::Tensor alpha, sigma, lambda;
};

// The coefficients one UniP / UniC update shares: hh, h*phi_1(hh), B(h), the rhos' linear
// system R rho = b, and the scaled differences D1s.
struct UpdateTerms {
  at::Tensor hh, h_phi_1, b_h, r, b;
  std::vector<at::Tensor> d1s;
};

class UniPcScheduler final : public Scheduler {
 public:
  explicit UniPcScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/true, /*pins_last_alpha=*/true})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction, Prediction::kSample})),
        spacing_(read_spacing(cfg, Spacing::kLinspace)),
        steps_offset_(cfg.integer("steps_offset", 0)),
        solver_order_(cfg.integer("solver_order", 2)),
        thresholding_(cfg.boolean("thresholding", false)),
        dynamic_thresholding_ratio_(cfg.number("dynamic_thresholding_ratio", 0.995)),
        sample_max_value_(cfg.number("sample_max_value", 1.0)),
        predict_x0_(cfg.boolean("predict_x0", true)),
        lower_order_final_(cfg.boolean("lower_order_final", true)),
        karras_(cfg.boolean("use_karras_sigmas", false)),
        exponential_(cfg.boolean("use_exponential_sigmas", false)),
        sigma_min_(cfg.optional_number("sigma_min")),
        sigma_max_(cfg.optional_number("sigma_max")) {
    if (solver_order_ < 1) cfg.refuse("solver_order", std::to_string(solver_order_), "1 or more");
    const std::string solver_type = cfg.string("solver_type", "bh2");
    if (solver_type == "bh1") {
      bh1_ = true;
    } else if (solver_type != "bh2" && solver_type != "midpoint" && solver_type != "heun" && solver_type != "logrho") {
      cfg.refuse("solver_type", "'" + solver_type + "'", "bh1, bh2");
    }
    for (double v : cfg.number_list("disable_corrector")) disable_corrector_.push_back(static_cast<int64_t>(v));
    if (cfg.has("solver_p")) cfg.refuse("solver_p", "(a scheduler)", "null");
    const std::string final_type = cfg.string("final_sigmas_type", "zero");
    if (final_type != "zero" && final_type != "sigma_min") {
      cfg.refuse("final_sigmas_type", "'" + final_type + "'", "zero, sigma_min");
    }
    final_zero_ = final_type == "zero";
    cfg.require_false("use_beta_sigmas", "beta sigmas");
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
    std::vector<double> ts;
    switch (spacing_) {
      case Spacing::kLinspace: {
        std::vector<double> v = np_linspace(0, static_cast<double>(t_count - 1), n + 1);
        for (auto it = v.rbegin(); it + 1 != v.rend(); ++it) ts.push_back(np_round(*it));
        break;
      }
      case Spacing::kLeading: {
        const int64_t ratio = t_count / (n + 1);
        for (int64_t i = n; i >= 1; --i) ts.push_back(static_cast<double>(i * ratio + steps_offset_));
        break;
      }
      case Spacing::kTrailing:
        for (double v : np_arange(static_cast<double>(t_count), 0, -(static_cast<double>(t_count) / n))) {
          ts.push_back(np_round(v) - 1);
        }
        break;
    }
    const std::vector<float> base = training_sigmas(schedule_.alphas_cumprod);
    std::vector<double> sig;
    double last = 0.0;
    if (karras_ || exponential_) {
      const std::vector<float> log_sigmas = log_f32(base);
      const double lo = sigma_min_.value_or(base.front());
      const double hi = sigma_max_.value_or(base.back());
      sig = karras_ ? karras_sigmas(lo, hi, n) : exponential_sigmas(lo, hi, n);
      ts.clear();
      for (double s : sig) {
        const double t = sigma_to_t(s, log_sigmas);
        ts.push_back(karras_ ? np_round(t) : t);
      }
      if (!final_zero_) last = sig.back();
    } else {
      sig = np_interp(ts, base);
      at::Tensor acp0 = schedule_.alphas_cumprod[0];
      if (!final_zero_) last = ((1 - acp0) / acp0).pow(0.5).item<double>();
    }
    sig.push_back(last);
    sigmas_ = float32_tensor(sig);
    std::vector<int64_t> ts_int;
    for (double t : ts) ts_int.push_back(static_cast<int64_t>(t));  // torch's .to(int64) truncates
    timesteps_ = at::tensor(ts_int, at::kLong);

    begin_ = first_step_index(timesteps_);
    start_ = 0;
    model_outputs_.assign(static_cast<size_t>(solver_order_), at::Tensor());
    lower_order_nums_ = 0;
    this_order_ = 0;
    last_sample_ = at::Tensor();
    calls_ = 0;
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  double init_noise_sigma() const override { return 1.0; }
  at::Tensor scale_model_input(const at::Tensor& sample, int64_t /*step_index*/) const override { return sample; }

  at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample_in,
                  std::vector<at::Generator>& /*generators*/) override {
    if (!sigmas_.defined()) throw Error("scheduler " + who_ + ": call set_timesteps() before step()");
    check_step_order(step_index, calls_, who_);
    const int64_t idx = begin_ + step_index;
    const int64_t n = timesteps_.size(0);
    const bool use_corrector =
        idx > 0 && last_sample_.defined() &&
        std::find(disable_corrector_.begin(), disable_corrector_.end(), idx - 1) == disable_corrector_.end();

    at::Tensor converted = convert_model_output(model_output, sample_in, idx);
    at::Tensor sample = sample_in;
    if (use_corrector) sample = corrector(converted, last_sample_, sample_in, this_order_, idx);

    for (int64_t i = 0; i + 1 < solver_order_; ++i) model_outputs_[i] = model_outputs_[i + 1];
    model_outputs_.back() = converted;

    int64_t order = lower_order_final_ ? std::min(solver_order_, n - idx) : solver_order_;
    this_order_ = std::min(order, lower_order_nums_ + 1);
    if (this_order_ < 1)
      throw Error(fmt::format("scheduler {}: step_index {} is past its {} timesteps", who_, step_index, n));
    last_sample_ = sample;
    at::Tensor prev = predictor(sample, this_order_, idx);
    if (lower_order_nums_ < solver_order_) ++lower_order_nums_;
    ++calls_;
    return prev;
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
  bool needs_generator() const override { return false; }

 private:
  UniPcVpPoint point(int64_t index) const {
    auto [alpha, sigma] = vp_alpha_sigma(at_index(sigmas_, index, who_, "noise levels"));
    at::Tensor lambda = at::log(alpha) - at::log(sigma);
    return {alpha, sigma, lambda};
  }

  at::Tensor convert_model_output(const at::Tensor& model_output, const at::Tensor& sample, int64_t idx) const {
    auto [alpha_t, sigma_t] = vp_alpha_sigma(at_index(sigmas_, idx, who_, "noise levels"));
    if (predict_x0_) {
      at::Tensor x0;
      switch (prediction_) {
        case Prediction::kEpsilon:
          x0 = (sample - sigma_t * model_output) / alpha_t;
          break;
        case Prediction::kSample:
          x0 = model_output;
          break;
        case Prediction::kVPrediction:
          x0 = alpha_t * sample - sigma_t * model_output;
          break;
      }
      if (thresholding_) x0 = threshold_sample(x0, dynamic_thresholding_ratio_, sample_max_value_);
      return x0;
    }
    switch (prediction_) {
      case Prediction::kEpsilon:
        return model_output;
      case Prediction::kSample:
        return (sample - alpha_t * model_output) / sigma_t;
      case Prediction::kVPrediction:
        break;
    }
    return alpha_t * model_output + sigma_t * sample;
  }

  // Ref: multistep_uni_p_bh_update / multistep_uni_c_bh_update, the part they share. `t` and
  // `s0` are the target and the base point; the history points are `first_history` and earlier.
  UpdateTerms terms(const UniPcVpPoint& t, const UniPcVpPoint& s0, int64_t order, int64_t first_history) const {
    UpdateTerms u;
    at::Tensor h = t.lambda - s0.lambda;
    const at::Tensor& m0 = model_outputs_.back();
    std::vector<at::Tensor> rks;
    for (int64_t i = 1; i < order; ++i) {
      const UniPcVpPoint si = point(first_history - (i - 1));
      const at::Tensor& mi = model_outputs_[model_outputs_.size() - 1 - static_cast<size_t>(i)];
      at::Tensor rk = (si.lambda - s0.lambda) / h;
      rks.push_back(rk);
      u.d1s.push_back((mi - m0) / rk);
    }
    rks.push_back(scalar_f32(1.0));
    at::Tensor rk_t = at::stack(rks);
    u.hh = predict_x0_ ? -h : h;
    u.h_phi_1 = at::expm1(u.hh);
    at::Tensor h_phi_k = u.h_phi_1 / u.hh - 1;
    int64_t factorial = 1;
    u.b_h = bh1_ ? u.hh : at::expm1(u.hh);
    std::vector<at::Tensor> r_rows, b_vals;
    for (int64_t i = 1; i <= order; ++i) {
      r_rows.push_back(at::pow(rk_t, i - 1));
      b_vals.push_back(h_phi_k * factorial / u.b_h);
      factorial *= i + 1;
      h_phi_k = h_phi_k / u.hh - 1.0 / static_cast<double>(factorial);
    }
    u.r = at::stack(r_rows);
    u.b = at::stack(b_vals);
    return u;
  }

  at::Tensor predictor(const at::Tensor& x, int64_t order, int64_t idx) const {
    const UniPcVpPoint t = point(idx + 1), s0 = point(idx);
    const at::Tensor& m0 = model_outputs_.back();
    UpdateTerms u = terms(t, s0, order, idx - 1);
    at::Tensor pred_res;
    if (!u.d1s.empty()) {
      at::Tensor rhos = order == 2 ? at::tensor({0.5}, at::kFloat)
                                   : at::linalg_solve(u.r.slice(0, 0, -1).slice(1, 0, -1), u.b.slice(0, 0, -1));
      rhos = rhos.to(x.device(), x.scalar_type());
      pred_res = at::einsum("k,bkc...->bc...", {rhos, at::stack(u.d1s, 1)});
    }
    at::Tensor x_t = predict_x0_ ? t.sigma / s0.sigma * x - t.alpha * u.h_phi_1 * m0
                                 : t.alpha / s0.alpha * x - t.sigma * u.h_phi_1 * m0;
    if (pred_res.defined()) x_t = x_t - (predict_x0_ ? t.alpha : t.sigma) * u.b_h * pred_res;
    return x_t.to(x.scalar_type());
  }

  at::Tensor corrector(const at::Tensor& model_t, const at::Tensor& x, const at::Tensor& this_sample, int64_t order,
                       int64_t idx) const {
    const UniPcVpPoint t = point(idx), s0 = point(idx - 1);
    const at::Tensor& m0 = model_outputs_.back();
    UpdateTerms u = terms(t, s0, order, idx - 2);
    at::Tensor rhos = order == 1 ? at::tensor({0.5}, at::kFloat) : at::linalg_solve(u.r, u.b);
    rhos = rhos.to(this_sample.device(), x.scalar_type());
    at::Tensor x_t = predict_x0_ ? t.sigma / s0.sigma * x - t.alpha * u.h_phi_1 * m0
                                 : t.alpha / s0.alpha * x - t.sigma * u.h_phi_1 * m0;
    at::Tensor d1_t = model_t - m0;
    at::Tensor correction = rhos[-1] * d1_t;
    if (!u.d1s.empty()) {
      correction = at::einsum("k,bkc...->bc...", {rhos.slice(0, 0, -1), at::stack(u.d1s, 1)}) + correction;
    }
    x_t = x_t - (predict_x0_ ? t.alpha : t.sigma) * u.b_h * correction;
    return x_t.to(x.scalar_type());
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
  bool predict_x0_;
  bool lower_order_final_;
  bool karras_;
  bool exponential_;
  std::optional<double> sigma_min_;
  std::optional<double> sigma_max_;
  bool bh1_ = false;
  bool final_zero_ = true;
  std::vector<int64_t> disable_corrector_;

  at::Tensor timesteps_;
  at::Tensor sigmas_;
  int64_t begin_ = 0;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  std::vector<at::Tensor> model_outputs_;
  int64_t lower_order_nums_ = 0;
  int64_t this_order_ = 0;
  at::Tensor last_sample_;
  int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_unipc(const ConfigReader& cfg) { return std::make_unique<UniPcScheduler>(cfg); }

}  // namespace dpinfer::pipeline::schedulers

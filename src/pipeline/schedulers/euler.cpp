// Ref: diffusers/schedulers/scheduling_euler_discrete.py (EulerDiscreteScheduler)
#include <cmath>

#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

class EulerScheduler final : public Scheduler {
 public:
  explicit EulerScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/true, /*pins_last_alpha=*/true})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction, Prediction::kSample})),
        spacing_(read_spacing(cfg, Spacing::kLinspace)),
        steps_offset_(cfg.integer("steps_offset", 0)),
        karras_(cfg.boolean("use_karras_sigmas", false)),
        exponential_(cfg.boolean("use_exponential_sigmas", false)),
        sigma_min_(cfg.optional_number("sigma_min")),
        sigma_max_(cfg.optional_number("sigma_max")) {
    cfg.require_false("use_beta_sigmas", "beta sigmas");
    if (karras_ && exponential_) {
      cfg.refuse("use_karras_sigmas", "true with use_exponential_sigmas true", "at most one of them");
    }
    const std::string interpolation = cfg.string("interpolation_type", "linear");
    if (interpolation == "linear") {
      log_linear_ = false;
    } else if (interpolation == "log_linear") {
      log_linear_ = true;
    } else {
      cfg.refuse("interpolation_type", "'" + interpolation + "'", "linear, log_linear");
    }
    const std::string timestep_type = cfg.string("timestep_type", "discrete");
    if (timestep_type != "discrete" && timestep_type != "continuous") {
      cfg.refuse("timestep_type", "'" + timestep_type + "'", "discrete, continuous");
    }
    continuous_ = timestep_type == "continuous" && prediction_ == Prediction::kVPrediction;
    const std::string final_type = cfg.string("final_sigmas_type", "zero");
    if (final_type != "zero" && final_type != "sigma_min") {
      cfg.refuse("final_sigmas_type", "'" + final_type + "'", "zero, sigma_min");
    }
    final_sigma_min_ = final_type == "sigma_min";
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

    std::vector<double> sig;
    if (!log_linear_) {
      sig = np_interp(ts, base);
    } else {
      // torch.linspace(log(sigma_max), log(sigma_min), n + 1).exp(), in float32: n + 1 levels, as diffusers has it.
      at::Tensor s = at::linspace(static_cast<double>(log_f32({base.back()})[0]),
                                  static_cast<double>(log_f32({base.front()})[0]), n + 1, at::kFloat)
                         .exp();
      sig.assign(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
    }
    if (karras_ || exponential_) {
      const double lo = sigma_min_.value_or(sig.back());
      const double hi = sigma_max_.value_or(sig.front());
      sig = karras_ ? karras_sigmas(lo, hi, n) : exponential_sigmas(lo, hi, n);
      ts.clear();
      for (double s : sig) ts.push_back(static_cast<float>(sigma_to_t(s, log_sigmas)));
    }
    at::Tensor acp0 = schedule_.alphas_cumprod[0];
    sig.push_back(final_sigma_min_ ? ((1 - acp0) / acp0).pow(0.5).item<double>() : 0.0);
    sigmas_ = float32_tensor(sig);

    if (continuous_) {
      std::vector<at::Tensor> cont;
      for (int64_t i = 0; i + 1 < sigmas_.size(0); ++i) cont.push_back(sigmas_[i].log() * 0.25);
      timesteps_ = at::stack(cont);
    } else {
      timesteps_ = float32_tensor(ts);
    }
    begin_ = first_step_index(timesteps_);
    start_ = 0;
    init_noise_sigma_ = sigma_space_init_noise_sigma(sigmas_, spacing_);
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  double init_noise_sigma() const override { return init_noise_sigma_; }

  at::Tensor scale_model_input(const at::Tensor& sample, int64_t step_index) const override {
    ensure_ready();
    return sample / input_scale(at_index(sigmas_, begin_ + step_index, who_, "noise levels"));
  }

  at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample_in,
                  std::vector<at::Generator>& /*generators*/) override {
    ensure_ready();
    const int64_t idx = begin_ + step_index;
    at::Tensor sample = sample_in.to(at::kFloat);
    at::Tensor sigma = at_index(sigmas_, idx, who_, "noise levels");
    // s_churn is 0 in the pipeline, so gamma = 0 and sigma_hat = sigma.
    const at::Tensor& sigma_hat = sigma;
    at::Tensor x0;
    switch (prediction_) {
      case Prediction::kEpsilon:
        x0 = sample - sigma_hat * model_output;
        break;
      case Prediction::kVPrediction:
        x0 = sigma_space_v_to_x0(model_output, sample, sigma);
        break;
      case Prediction::kSample:
        x0 = model_output;
        break;
    }
    at::Tensor derivative = (sample - x0) / sigma_hat;
    at::Tensor dt = at_index(sigmas_, idx + 1, who_, "noise levels") - sigma_hat;
    at::Tensor prev = sample + derivative * dt;
    return prev.to(model_output.scalar_type());
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

  std::string who_;
  NoiseSchedule schedule_;
  Prediction prediction_;
  Spacing spacing_;
  int64_t steps_offset_;
  bool karras_;
  bool exponential_;
  std::optional<double> sigma_min_;
  std::optional<double> sigma_max_;
  bool log_linear_ = false;
  bool continuous_ = false;
  bool final_sigma_min_ = false;

  at::Tensor timesteps_;
  at::Tensor sigmas_;
  int64_t begin_ = 0;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  double init_noise_sigma_ = 1.0;
};

}  // namespace

std::unique_ptr<Scheduler> make_euler(const ConfigReader& cfg) { return std::make_unique<EulerScheduler>(cfg); }

}  // namespace dpinfer::pipeline::schedulers

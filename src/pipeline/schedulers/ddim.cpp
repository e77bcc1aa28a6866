// Ref: diffusers/schedulers/scheduling_ddim.py (DDIMScheduler)
#include <cmath>

#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

class DdimScheduler final : public Scheduler {
 public:
  DdimScheduler(const ConfigReader& cfg, double eta)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/true, /*pins_last_alpha=*/false})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction, Prediction::kSample})),
        spacing_(read_spacing(cfg, Spacing::kLeading)),
        steps_offset_(cfg.integer("steps_offset", 0)),
        clip_sample_(cfg.boolean("clip_sample", true)),
        clip_sample_range_(cfg.number("clip_sample_range", 1.0)),
        thresholding_(cfg.boolean("thresholding", false)),
        dynamic_thresholding_ratio_(cfg.number("dynamic_thresholding_ratio", 0.995)),
        sample_max_value_(cfg.number("sample_max_value", 1.0)),
        eta_(eta) {
    final_alpha_cumprod_ =
        cfg.boolean("set_alpha_to_one", true) ? scalar_f32(1.0) : schedule_.alphas_cumprod[0].clone();
  }

  void set_timesteps(const TimestepRequest& request) override {
    const int64_t num_inference_steps = schedulers::step_count(request, who_);
    const int64_t t_count = schedule_.num_train_timesteps;
    if (num_inference_steps < 1 || num_inference_steps > t_count) {
      throw Error(fmt::format("scheduler {}: num_inference_steps must be in [1, {}], got {}", who_, t_count,
                              num_inference_steps));
    }
    num_inference_steps_ = num_inference_steps;
    const int64_t n = num_inference_steps;
    std::vector<int64_t> ts;
    switch (spacing_) {
      case Spacing::kLinspace: {
        std::vector<double> v = np_linspace(0, static_cast<double>(t_count - 1), n);
        for (auto it = v.rbegin(); it != v.rend(); ++it) ts.push_back(static_cast<int64_t>(np_round(*it)));
        break;
      }
      case Spacing::kLeading:
        for (int64_t i = n - 1; i >= 0; --i) ts.push_back(i * (t_count / n) + steps_offset_);
        break;
      case Spacing::kTrailing:
        for (double v : np_arange(static_cast<double>(t_count), 0, -(static_cast<double>(t_count) / n))) {
          ts.push_back(static_cast<int64_t>(np_round(v)) - 1);
        }
        break;
    }
    timesteps_ = at::tensor(ts, at::kLong);
    start_ = 0;
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return {}; }
  double init_noise_sigma() const override { return 1.0; }
  at::Tensor scale_model_input(const at::Tensor& sample, int64_t /*step_index*/) const override { return sample; }

  at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample,
                  std::vector<at::Generator>& generators) override {
    if (num_inference_steps_ == 0) throw Error("scheduler " + who_ + ": call set_timesteps() before step()");
    const int64_t t = at_index(timesteps_, start_ + step_index, who_, "timesteps").item<int64_t>();
    const int64_t prev_t = t - schedule_.num_train_timesteps / num_inference_steps_;

    at::Tensor alpha_t = at_index(schedule_.alphas_cumprod, t, who_, "training timesteps");
    at::Tensor alpha_prev =
        prev_t >= 0 ? at_index(schedule_.alphas_cumprod, prev_t, who_, "training timesteps") : final_alpha_cumprod_;
    at::Tensor beta_t = 1 - alpha_t;

    at::Tensor x0, eps;
    switch (prediction_) {
      case Prediction::kEpsilon:
        x0 = (sample - beta_t.pow(0.5) * model_output) / alpha_t.pow(0.5);
        eps = model_output;
        break;
      case Prediction::kSample:
        x0 = model_output;
        eps = (sample - alpha_t.pow(0.5) * x0) / beta_t.pow(0.5);
        break;
      case Prediction::kVPrediction:
        x0 = alpha_t.pow(0.5) * sample - beta_t.pow(0.5) * model_output;
        eps = alpha_t.pow(0.5) * model_output + beta_t.pow(0.5) * sample;
        break;
    }
    if (thresholding_) {
      x0 = threshold_sample(x0, dynamic_thresholding_ratio_, sample_max_value_);
    } else if (clip_sample_) {
      x0 = x0.clamp(-clip_sample_range_, clip_sample_range_);
    }

    // Ref: _get_variance, formula (16) of the DDIM paper.
    at::Tensor beta_prev = 1 - alpha_prev;
    at::Tensor variance = (beta_prev / beta_t) * (1 - alpha_t / alpha_prev);
    at::Tensor std_dev_t = variance.pow(0.5) * eta_;
    at::Tensor direction = (1 - alpha_prev - std_dev_t.pow(2)).pow(0.5) * eps;
    at::Tensor prev = alpha_prev.pow(0.5) * x0 + direction;
    if (eta_ > 0) {
      at::Tensor noise = per_row_noise(model_output, model_output.scalar_type(), generators, who_);
      prev = prev + std_dev_t * noise;
    }
    return prev;
  }

  void set_begin_index(int64_t begin) override { start_ = begin; }
  int64_t begin_index() const override { return start_; }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, int64_t position) const override {
    const int64_t t = at_index(timesteps_, position, who_, "timesteps").item<int64_t>();
    return alphas_add_noise(schedule_.alphas_cumprod, t, original, noise, who_);
  }

  std::string name() const override { return who_; }
  bool needs_generator() const override { return eta_ > 0; }

 private:
  std::string who_;
  NoiseSchedule schedule_;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  Prediction prediction_;
  Spacing spacing_;
  int64_t steps_offset_;
  bool clip_sample_;
  double clip_sample_range_;
  bool thresholding_;
  double dynamic_thresholding_ratio_;
  double sample_max_value_;
  double eta_;
  at::Tensor final_alpha_cumprod_;

  int64_t num_inference_steps_ = 0;
  at::Tensor timesteps_;
};

}  // namespace

std::unique_ptr<Scheduler> make_ddim(const ConfigReader& cfg, double eta) {
  return std::make_unique<DdimScheduler>(cfg, eta);
}

}  // namespace dpinfer::pipeline::schedulers

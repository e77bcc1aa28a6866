// Ref: diffusers/schedulers/scheduling_euler_ancestral_discrete.py (EulerAncestralDiscreteScheduler)
#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

class EulerAncestralScheduler final : public Scheduler {
 public:
  explicit EulerAncestralScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/true, /*pins_last_alpha=*/true})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction})),
        spacing_(read_spacing(cfg, Spacing::kLinspace)),
        steps_offset_(cfg.integer("steps_offset", 0)) {}

  void set_timesteps(const TimestepRequest& request) override {
    const int64_t num_inference_steps = schedulers::step_count(request, who_);
    if (num_inference_steps < 1) {
      throw Error(
          fmt::format("scheduler {}: num_inference_steps must be at least 1, got {}", who_, num_inference_steps));
    }
    std::vector<float> ts =
        discrete_timesteps(spacing_, schedule_.num_train_timesteps, num_inference_steps, steps_offset_);
    std::vector<double> sig =
        np_interp(std::vector<double>(ts.begin(), ts.end()), training_sigmas(schedule_.alphas_cumprod));
    sig.push_back(0.0);
    sigmas_ = float32_tensor(sig);
    timesteps_ = at::tensor(ts, at::kFloat);
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
                  std::vector<at::Generator>& generators) override {
    ensure_ready();
    const int64_t idx = begin_ + step_index;
    at::Tensor sigma = at_index(sigmas_, idx, who_, "noise levels");
    at::Tensor sample = sample_in.to(at::kFloat);
    at::Tensor x0 = prediction_ == Prediction::kEpsilon ? sample - sigma * model_output
                                                        : sigma_space_v_to_x0(model_output, sample, sigma);
    const at::Tensor& sigma_from = sigma;
    at::Tensor sigma_to = at_index(sigmas_, idx + 1, who_, "noise levels");
    at::Tensor sigma_up = (sigma_to.pow(2) * (sigma_from.pow(2) - sigma_to.pow(2)) / sigma_from.pow(2)).pow(0.5);
    at::Tensor sigma_down = (sigma_to.pow(2) - sigma_up.pow(2)).pow(0.5);
    at::Tensor derivative = (sample - x0) / sigma;
    at::Tensor dt = sigma_down - sigma;
    at::Tensor prev = sample + derivative * dt;
    // Drawn on every step, the last (sigma_up = 0) included, so the generators advance as in diffusers.
    at::Tensor noise = per_row_noise(model_output, model_output.scalar_type(), generators, who_);
    prev = prev + noise * sigma_up;
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
  bool needs_generator() const override { return true; }

 private:
  void ensure_ready() const {
    if (!sigmas_.defined()) throw Error("scheduler " + who_ + ": call set_timesteps() before using it");
  }

  std::string who_;
  NoiseSchedule schedule_;
  Prediction prediction_;
  Spacing spacing_;
  int64_t steps_offset_;

  at::Tensor timesteps_;
  at::Tensor sigmas_;
  int64_t begin_ = 0;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  double init_noise_sigma_ = 1.0;
};

}  // namespace

std::unique_ptr<Scheduler> make_euler_ancestral(const ConfigReader& cfg) {
  return std::make_unique<EulerAncestralScheduler>(cfg);
}

}  // namespace dpinfer::pipeline::schedulers

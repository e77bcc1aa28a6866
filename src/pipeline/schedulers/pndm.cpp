// Ref: diffusers/schedulers/scheduling_pndm.py (PNDMScheduler)
#include <fmt/format.h>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline::schedulers {
namespace {

constexpr int64_t kPndmOrder = 4;

class PndmScheduler final : public Scheduler {
 public:
  explicit PndmScheduler(const ConfigReader& cfg)
      : who_(cfg.who()),
        schedule_(make_noise_schedule(cfg, {/*knows_zero_snr=*/false, /*pins_last_alpha=*/false})),
        prediction_(read_prediction(cfg, {Prediction::kEpsilon, Prediction::kVPrediction})),
        spacing_(read_spacing(cfg, Spacing::kLeading)),
        steps_offset_(cfg.integer("steps_offset", 0)),
        skip_prk_steps_(cfg.boolean("skip_prk_steps", false)) {
    final_alpha_cumprod_ =
        cfg.boolean("set_alpha_to_one", false) ? scalar_f32(1.0) : schedule_.alphas_cumprod[0].clone();
  }

  void set_timesteps(const TimestepRequest& request) override {
    const int64_t num_inference_steps = schedulers::step_count(request, who_);
    const int64_t t_count = schedule_.num_train_timesteps;
    if (num_inference_steps < 1 || num_inference_steps > t_count) {
      throw Error(fmt::format("scheduler {}: num_inference_steps must be in [1, {}], got {}", who_, t_count,
                              num_inference_steps));
    }
    if (!skip_prk_steps_ && num_inference_steps < kPndmOrder) {
      throw Error(
          fmt::format("scheduler {}: with skip_prk_steps false it needs at least {} inference steps, got {}; "
                      "use more steps or set skip_prk_steps",
                      who_, kPndmOrder, num_inference_steps));
    }
    num_inference_steps_ = num_inference_steps;
    const int64_t n = num_inference_steps;
    // _timesteps, ascending.
    std::vector<int64_t> base;
    switch (spacing_) {
      case Spacing::kLinspace:
        for (double v : np_linspace(0, static_cast<double>(t_count - 1), n))
          base.push_back(static_cast<int64_t>(np_round(v)));
        break;
      case Spacing::kLeading:
        for (int64_t i = 0; i < n; ++i) base.push_back(i * (t_count / n) + steps_offset_);
        break;
      case Spacing::kTrailing: {
        std::vector<double> v = np_arange(static_cast<double>(t_count), 0, -(static_cast<double>(t_count) / n));
        for (auto it = v.rbegin(); it != v.rend(); ++it) base.push_back(static_cast<int64_t>(np_round(*it)) - 1);
        break;
      }
    }
    std::vector<int64_t> prk, plms;
    if (skip_prk_steps_) {
      // concat(ts[:-1], ts[-2:-1], ts[-1:])[::-1]: the first PLMS step is evaluated twice.
      std::vector<int64_t> seq(base.begin(), base.end() - 1);
      if (base.size() >= 2) seq.push_back(base[base.size() - 2]);
      seq.push_back(base.back());
      plms.assign(seq.rbegin(), seq.rend());
    } else {
      // The last kPndmOrder timesteps, each at t and t + half a step, repeated for RK4's stages.
      std::vector<int64_t> pairs;
      const int64_t half = t_count / n / 2;
      for (size_t i = base.size() - kPndmOrder; i < base.size(); ++i) {
        pairs.push_back(base[i]);
        pairs.push_back(base[i] + half);
      }
      pairs.pop_back();
      std::vector<int64_t> doubled;
      for (int64_t v : pairs) {
        doubled.push_back(v);
        doubled.push_back(v);
      }
      prk.assign(doubled.rbegin() + 1, doubled.rend() - 1);
      plms.assign(base.rbegin() + (kPndmOrder - 1), base.rend());
    }
    prk_timesteps_ = prk;
    std::vector<int64_t> all = prk;
    all.insert(all.end(), plms.begin(), plms.end());
    timesteps_values_ = all;
    timesteps_ = at::tensor(all, at::kLong);
    ets_.clear();
    counter_ = 0;
    start_ = 0;
    cur_model_output_ = at::Tensor();
    cur_sample_ = at::Tensor();
  }

  const at::Tensor& timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return {}; }
  double init_noise_sigma() const override { return 1.0; }
  at::Tensor scale_model_input(const at::Tensor& sample, int64_t /*step_index*/) const override { return sample; }

  at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample,
                  std::vector<at::Generator>& /*generators*/) override {
    if (num_inference_steps_ == 0) throw Error("scheduler " + who_ + ": call set_timesteps() before step()");
    check_step_order(step_index, counter_, who_);
    if (start_ + step_index >= static_cast<int64_t>(timesteps_values_.size())) {
      throw Error(fmt::format("scheduler {}: step_index {} is past its {} timesteps", who_, step_index,
                              timesteps_values_.size()));
    }
    const int64_t t = timesteps_values_[static_cast<size_t>(start_ + step_index)];
    if (counter_ < static_cast<int64_t>(prk_timesteps_.size()) && !skip_prk_steps_) {
      return step_prk(model_output, t, sample);
    }
    return step_plms(model_output, t, sample);
  }

  // PNDM has no set_begin_index in diffusers: its img2img loop starts at t_start of the timesteps,
  // with the counter (and so the PLMS history) from 0.
  void set_begin_index(int64_t begin) override { start_ = begin; }
  int64_t begin_index() const override { return start_; }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, int64_t position) const override {
    const int64_t t = at_index(timesteps_, position, who_, "timesteps").item<int64_t>();
    return alphas_add_noise(schedule_.alphas_cumprod, t, original, noise, who_);
  }

  std::string name() const override { return who_; }
  bool needs_generator() const override { return false; }

 private:
  at::Tensor step_prk(const at::Tensor& model_output, int64_t timestep, const at::Tensor& sample) {
    const int64_t diff_to_prev = counter_ % 2 ? 0 : schedule_.num_train_timesteps / num_inference_steps_ / 2;
    const int64_t prev_timestep = timestep - diff_to_prev;
    const int64_t t = prk_timesteps_[static_cast<size_t>(counter_ / 4 * 4)];
    at::Tensor output = model_output;
    switch (counter_ % 4) {
      case 0:
        cur_model_output_ = add_to_running(model_output * (1.0 / 6));
        ets_.push_back(model_output);
        cur_sample_ = sample;
        break;
      case 1:
      case 2:
        cur_model_output_ = add_to_running(model_output * (1.0 / 3));
        break;
      default:
        output = add_to_running(model_output * (1.0 / 6));
        cur_model_output_ = at::Tensor();
        break;
    }
    const at::Tensor& base = cur_sample_.defined() ? cur_sample_ : sample;
    at::Tensor prev = previous_sample(base, t, prev_timestep, output);
    ++counter_;
    return prev;
  }

  at::Tensor step_plms(const at::Tensor& model_output, int64_t timestep, const at::Tensor& sample) {
    if (!skip_prk_steps_ && ets_.size() < 3) {
      throw Error("scheduler " + who_ + ": PLMS steps need the 12 PRK warm-up steps first");
    }
    const int64_t ratio = schedule_.num_train_timesteps / num_inference_steps_;
    int64_t t = timestep;
    int64_t prev_timestep = timestep - ratio;
    if (counter_ != 1) {
      if (ets_.size() > 3) ets_.erase(ets_.begin(), ets_.end() - 3);
      ets_.push_back(model_output);
    } else {
      prev_timestep = timestep;
      t = timestep + ratio;
    }
    at::Tensor output;
    at::Tensor x = sample;
    const size_t k = ets_.size();
    if (k == 1 && counter_ == 0) {
      output = model_output;
      cur_sample_ = sample;
    } else if (k == 1 && counter_ == 1) {
      output = (model_output + ets_.back()) / 2;
      x = cur_sample_;
      cur_sample_ = at::Tensor();
    } else if (k == 2) {
      output = (3 * ets_[1] - ets_[0]) / 2;
    } else if (k == 3) {
      output = (23 * ets_[2] - 16 * ets_[1] + 5 * ets_[0]) / 12;
    } else {
      output = (1.0 / 24) * (55 * ets_[3] - 59 * ets_[2] + 37 * ets_[1] - 9 * ets_[0]);
    }
    at::Tensor prev = previous_sample(x, t, prev_timestep, output);
    ++counter_;
    return prev;
  }

  // Python's `self.cur_model_output += x` starting from the integer 0.
  at::Tensor add_to_running(const at::Tensor& term) const {
    return cur_model_output_.defined() ? cur_model_output_ + term : term;
  }

  // Ref: _get_prev_sample, formula (9) of the PNDM paper; 0-d float32 scalars as in diffusers.
  at::Tensor previous_sample(const at::Tensor& sample, int64_t timestep, int64_t prev_timestep,
                             at::Tensor model_output) const {
    at::Tensor alpha_t = at_index(schedule_.alphas_cumprod, timestep, who_, "training timesteps");
    at::Tensor alpha_prev = prev_timestep >= 0
                                ? at_index(schedule_.alphas_cumprod, prev_timestep, who_, "training timesteps")
                                : final_alpha_cumprod_;
    at::Tensor beta_t = 1 - alpha_t;
    at::Tensor beta_prev = 1 - alpha_prev;
    if (prediction_ == Prediction::kVPrediction) {
      model_output = alpha_t.pow(0.5) * model_output + beta_t.pow(0.5) * sample;
    }
    at::Tensor sample_coeff = (alpha_prev / alpha_t).pow(0.5);
    at::Tensor denom = alpha_t * beta_prev.pow(0.5) + (alpha_t * beta_t * alpha_prev).pow(0.5);
    return sample_coeff * sample - (alpha_prev - alpha_t) * model_output / denom;
  }

  std::string who_;
  NoiseSchedule schedule_;
  int64_t start_ = 0;  ///< set_begin_index(): where model call 0 is in timesteps_
  Prediction prediction_;
  Spacing spacing_;
  int64_t steps_offset_;
  bool skip_prk_steps_;
  at::Tensor final_alpha_cumprod_;

  int64_t num_inference_steps_ = 0;
  std::vector<int64_t> prk_timesteps_;
  std::vector<int64_t> timesteps_values_;
  at::Tensor timesteps_;
  int64_t counter_ = 0;
  std::vector<at::Tensor> ets_;
  at::Tensor cur_model_output_;  // undefined stands for Python's 0
  at::Tensor cur_sample_;
};

}  // namespace

std::unique_ptr<Scheduler> make_pndm(const ConfigReader& cfg) { return std::make_unique<PndmScheduler>(cfg); }

}  // namespace dpinfer::pipeline::schedulers

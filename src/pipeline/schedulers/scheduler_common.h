#pragma once
// Pieces every scheduler shares: reading its config the way diffusers' from_config
// does, the training noise schedule, numpy's float64 helpers reproduced operation
// for operation, and the per-row noise of diffusers' randn_tensor.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "dpinfer/io/config_reader.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"

namespace dpinfer::pipeline::schedulers {

/// A scheduler config read key by key with the target class's defaults (io::ConfigReader),
/// for the scheduler `who` (a dpinfer scheduler name), which every message names.
class ConfigReader : public io::ConfigReader {
 public:
  ConfigReader(nlohmann::json config, std::string who);

  /// The dpinfer scheduler name this config is read for.
  const std::string& who() const { return who_; }
  /// A list of numbers; empty when absent or null.
  std::vector<double> number_list(const std::string& key) const { return numbers(key).value_or(std::vector<double>{}); }
  /// Throws dpinfer::Error: `key` has `value` (already formatted), which dpinfer does not support.
  [[noreturn]] void refuse(const std::string& key, const std::string& value, const std::string& supported) const;
  /// Throws unless the boolean `key` is false (or absent): `what` says what it would enable.
  void require_false(const std::string& key, const std::string& what) const;

 private:
  std::string who_;
};

/// The step count of `request`, for a scheduler that takes nothing else: throws dpinfer::Error
/// (naming `who`) when the request carries sigmas, mu or sigma_min.
int64_t step_count(const TimestepRequest& request, const std::string& who);

/// What a model predicts.
enum class Prediction { kEpsilon, kVPrediction, kSample };

/// Reads prediction_type (default epsilon); values outside `allowed` throw dpinfer::Error.
Prediction read_prediction(const ConfigReader& cfg, const std::vector<Prediction>& allowed);

/// How inference timesteps are spread over the training ones.
enum class Spacing { kLinspace, kLeading, kTrailing };

/// Reads timestep_spacing with the class default `fallback`; unknown values throw dpinfer::Error.
Spacing read_spacing(const ConfigReader& cfg, Spacing fallback);

/// The training noise schedule.
struct NoiseSchedule {
  int64_t num_train_timesteps = 0;
  /// float32 [T]: cumprod(1 - betas), torch-computed as diffusers does.
  at::Tensor alphas_cumprod;
};

/// Options of make_noise_schedule that differ between classes.
struct NoiseScheduleOptions {
  /// Whether the class reads rescale_betas_zero_snr at all.
  bool knows_zero_snr = true;
  /// Whether the class then pins alphas_cumprod[-1] to 2^-24 (the sigma-space ones do).
  bool pins_last_alpha = false;
};

/// Betas from num_train_timesteps, beta_start, beta_end, beta_schedule (linear, scaled_linear,
/// squaredcos_cap_v2) or trained_betas, optionally rescaled to zero terminal SNR, and their
/// cumulative alpha product. Throws dpinfer::Error naming a bad field.
NoiseSchedule make_noise_schedule(const ConfigReader& cfg, const NoiseScheduleOptions& options);

/// ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5, in float32 torch, as a vector.
std::vector<float> training_sigmas(const at::Tensor& alphas_cumprod);

/// np.log of a float32 array, bit for bit as numpy's AVX2+FMA3 / AVX-512F kernel computes it
/// (the one x86 numpy runs on any CPU with AVX2 and FMA3): a P5/Q5 rational approximation,
/// up to 3.8 ulp from the true logarithm, which diffusers' Karras timesteps inherit.
std::vector<float> log_f32(const std::vector<float>& values);

/// np.linspace(start, stop, num) in float64.
std::vector<double> np_linspace(double start, double stop, int64_t num);

/// np.arange(start, stop, step) in float64 for a float step, filled as numpy fills it.
std::vector<double> np_arange(double start, double stop, double step);

/// np.round: half to even.
double np_round(double value);

/// np.interp(x, arange(len(fp)), fp) in float64.
std::vector<double> np_interp(const std::vector<double>& x, const std::vector<float>& fp);

/// diffusers' _sigma_to_t: the fractional training timestep of `sigma`, by linear
/// interpolation in log sigma (`log_sigmas` ascending, float32 as numpy has them).
double sigma_to_t(double sigma, const std::vector<float>& log_sigmas);

/// Karras et al. (2022) noise levels, rho = 7, from sigma_max down to sigma_min (float64).
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t num);

/// Log-uniform noise levels from sigma_max down to sigma_min (float64).
std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, int64_t num);

/// A 0-d float32 CPU tensor: the type diffusers' per-step scalars have.
at::Tensor scalar_f32(double value);

/// Element `index` of a 1-d tensor as a 0-d tensor, after a bounds check whose error names
/// the scheduler `who` and what `values` are (e.g. "noise levels").
at::Tensor at_index(const at::Tensor& values, int64_t index, const std::string& who, const char* what);

/// diffusers' randn_tensor(like.shape, generator=list, dtype=`dtype`): one generator per
/// batch row draws [1, ...] on the CPU (or a single one draws the whole shape), then the
/// result moves to like's device. Throws dpinfer::Error (naming `who`) when the count is wrong.
at::Tensor per_row_noise(const at::Tensor& like, at::ScalarType dtype, std::vector<at::Generator>& generators,
                         const std::string& who);

/// diffusers' _threshold_sample (dynamic thresholding, Saharia et al. 2022) of x0 [B, ...].
at::Tensor threshold_sample(const at::Tensor& sample, double ratio, double max_value);

/// Throws dpinfer::Error unless `step_index` is the next call `expected` (naming `who`).
void check_step_order(int64_t step_index, int64_t expected, const std::string& who);

/// diffusers' index_for_timestep on the first call: the position of `timesteps[0]`
/// (the second one when it occurs twice).
int64_t first_step_index(const at::Tensor& timesteps);

/// sqrt(sigma^2 + 1) as diffusers computes it for scale_model_input (0-d float32).
at::Tensor input_scale(const at::Tensor& sigma);

/// init_noise_sigma of euler, euler_a and lms: the largest sigma for linspace or trailing
/// spacing, else sqrt(max^2 + 1), computed in float32.
double sigma_space_init_noise_sigma(const at::Tensor& sigmas, Spacing spacing);

/// x0 from a v-prediction in sigma space (euler, euler_a, lms):
/// v * (-sigma / sqrt(sigma^2 + 1)) + sample / (sigma^2 + 1).
at::Tensor sigma_space_v_to_x0(const at::Tensor& v, const at::Tensor& sample, const at::Tensor& sigma);

/// diffusers' _sigma_to_alpha_sigma_t for VP schedules (dpm++2m, unipc): alpha = 1 / sqrt(sigma^2 + 1)
/// and sigma * alpha, as 0-d float32 tensors.
std::pair<at::Tensor, at::Tensor> vp_alpha_sigma(const at::Tensor& sigma);

/// img2img's noising (diffusers' add_noise / scale_noise), each in original's dtype, with the
/// schedule's values cast to it first, as diffusers does (`self.sigmas.to(dtype=original.dtype)`):
///  - alphas_add_noise (pndm, ddim): sqrt(acp[t]) * x + sqrt(1 - acp[t]) * noise at training timestep t;
///  - sigma_add_noise (euler, euler_a, lms): x + noise * sigmas[index];
///  - vp_add_noise (dpm++2m, unipc): alpha * x + sigma_t * noise, alpha = 1 / sqrt(sigma^2 + 1), sigma_t = sigma * alpha;
///  - flow_scale_noise (flow_match_euler): sigma * noise + (1 - sigma) * x.
at::Tensor alphas_add_noise(const at::Tensor& alphas_cumprod, int64_t t, const at::Tensor& original,
                            const at::Tensor& noise, const std::string& who);
at::Tensor sigma_add_noise(const at::Tensor& sigmas, int64_t index, const at::Tensor& original, const at::Tensor& noise,
                           const std::string& who);
at::Tensor vp_add_noise(const at::Tensor& sigmas, int64_t index, const at::Tensor& original, const at::Tensor& noise,
                        const std::string& who);
at::Tensor flow_scale_noise(const at::Tensor& sigmas, int64_t index, const at::Tensor& original,
                            const at::Tensor& noise, const std::string& who);

/// A float32 tensor from float64 values (numpy's astype(np.float32)).
at::Tensor float32_tensor(const std::vector<double>& values);

/// Inference timesteps for the sigma-space schedulers (euler, euler_a, lms) in float32:
/// linspace / leading (+ steps_offset) / trailing over T training steps, descending,
/// as diffusers stores them.
std::vector<float> discrete_timesteps(Spacing spacing, int64_t num_train_timesteps, int64_t steps,
                                      int64_t steps_offset);

}  // namespace dpinfer::pipeline::schedulers

#pragma once
// The denoising schedulers of diffusers, rebuilt in LibTorch so that the same
// scheduler_config.json gives the same timesteps and the same trajectory.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>

#include "dpinfer/pipeline/schedulers/prediction.h"

namespace dpinfer::pipeline {

/// What set_timesteps() is asked for. The schedulers of the UNet families take only the
/// step count; a flow-matching scheduler also takes the pipeline's own sigmas and the
/// `mu` of dynamic shifting (diffusers' set_timesteps(num_inference_steps, sigmas=, mu=)).
struct TimestepRequest {
  int64_t steps = 0;  ///< with sigmas, 0 means sigmas.size(), as retrieve_timesteps(sigmas=) calls it
  std::optional<double> mu;
  std::vector<double> sigmas;  ///< empty: the scheduler's own spacing
  /// The pipeline's override of the scheduler's sigma_min before set_timesteps(), as
  /// ZImagePipeline does (`scheduler.sigma_min = 0.0`); flow matching without sigmas only.
  std::optional<double> sigma_min;
};

/// One diffusers scheduler, built from a scheduler_config.json by make_scheduler().
///
/// Use it like StableDiffusionPipeline's loop: set_timesteps(n), multiply the initial
/// noise by init_noise_sigma(), then for i = 0, 1, ... timesteps().size(0) - 1:
///   x_in = scale_model_input(x, i); eps = unet(x_in, timesteps()[i]); x = step(eps, i, x, gens).
/// Scalars are computed in the precision diffusers uses (numpy float64 where it uses
/// numpy, float32 0-d tensors where it uses torch), so timesteps are identical and a
/// trajectory matches diffusers' to float32 rounding. Not thread-safe.
class Scheduler {
 public:
  virtual ~Scheduler() = default;

  /// Computes the timesteps for `request` (steps >= 1) and resets every per-run state.
  /// Throws dpinfer::Error when the count does not fit the config, when the request carries
  /// sigmas, mu or sigma_min that this scheduler does not take, or when it lacks the mu that
  /// a flow-matching config with use_dynamic_shifting needs.
  virtual void set_timesteps(const TimestepRequest& request) = 0;
  /// set_timesteps() with only a step count.
  void set_timesteps(int64_t num_inference_steps) {
    TimestepRequest request;
    request.steps = num_inference_steps;
    set_timesteps(request);
  }

  /// The timesteps to feed the UNet, one per model call, on the CPU: int64 for pndm, ddim,
  /// dpm++2m and unipc, float32 for euler, euler_a, lms and flow_match_euler, as in diffusers.
  /// PNDM makes more calls than inference steps (its first step is evaluated twice, PRK mode more).
  /// Undefined before set_timesteps().
  virtual const at::Tensor& timesteps() const = 0;

  /// The noise levels, one per timestep plus the final one (float32, CPU), for schedulers
  /// that have them (euler, euler_a, lms, dpm++2m, unipc, flow_match_euler); an undefined
  /// tensor otherwise.
  virtual at::Tensor sigmas() const = 0;

  /// The factor the initial Gaussian latents are multiplied by (valid after set_timesteps()).
  virtual double init_noise_sigma() const = 0;

  /// The UNet input for model call `step_index` (a position in timesteps()): `sample` itself
  /// (flow matching too), or divided by sqrt(sigma^2 + 1) for the sigma-space schedulers.
  virtual at::Tensor scale_model_input(const at::Tensor& sample, int64_t step_index) const = 0;

  /// One denoising step of a batch [B, ...] ([B, C, H, W] latents, or flow matching's packed
  /// [B, L, D]) for model call `step_index`; calls must come in order 0, 1, 2, ... after
  /// set_timesteps(). Returns the sample for the next call, in model_output's dtype and device.
  /// `generators` has one CPU generator per batch row, or a single one for the whole batch,
  /// and may be empty when needs_generator() is false. Noise for row i is drawn from
  /// generators[i] with shape [1, C, H, W] on the CPU and then moved to the sample's device,
  /// as diffusers' randn_tensor does with a list of generators, so a batched run equals
  /// per-row runs. Throws dpinfer::Error on an out-of-order call or a missing generator.
  virtual at::Tensor step(const at::Tensor& model_output, int64_t step_index, const at::Tensor& sample,
                          std::vector<at::Generator>& generators) = 0;

  /// img2img (issue 29): diffusers' set_begin_index(begin), which the img2img pipelines call after
  /// set_timesteps() with t_start * order. Model call 0 is then at timesteps()[begin], and the
  /// calls still come 0, 1, 2, ... (timesteps().size(0) - begin of them). PNDM and DDIM have no
  /// set_begin_index in diffusers; their pipelines' loop just starts there, which this does too.
  virtual void set_begin_index(int64_t begin) = 0;
  /// The position in timesteps() of model call 0: 0 unless set_begin_index() said otherwise.
  virtual int64_t begin_index() const = 0;
  /// `original` noised to the level of timesteps()[position]: diffusers' add_noise (for flow
  /// matching, scale_noise), computed in original's dtype as diffusers does. An img2img run starts
  /// from position begin_index(); an inpainting run with a 4-channel UNet blends the image back in
  /// at begin_index() + i + 1 after step i (the step index diffusers' schedulers hold then).
  virtual at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, int64_t position) const = 0;

  /// The dpinfer name, one of scheduler_names() (e.g. "dpm++2m-karras").
  virtual std::string name() const = 0;

  /// Whether step() draws noise, and so needs generators (euler_a, ddim with eta > 0,
  /// dpm++2m with algorithm_type sde-dpmsolver++).
  virtual bool needs_generator() const = 0;
};

/// Which scheduler make_scheduler() builds, and how.
struct SchedulerRequest {
  std::string name;  ///< a dpinfer name (scheduler_names()); empty: the config's own `_class_name`
  double eta = 0.0;  ///< DDIM's eta (>= 0); the other schedulers ignore it
  SchedulerConfigRewrite rewrite = nullptr;  ///< the pipeline's edits, if it makes any
  Prediction prediction = Prediction::kNoise;  ///< what the pipeline's denoiser predicts
};

/// Builds a scheduler from a parsed scheduler_config.json.
///
/// With `request.name` empty, builds the config's own `_class_name`. Otherwise builds the
/// named scheduler the way `pipe.scheduler = Other.from_config(pipe.scheduler.config)` does:
/// only keys present in the file carry over, keys the target does not know are ignored,
/// and the target's own defaults fill the rest; then the name's fixed keys apply
/// (scheduler_fixed_keys(): "dpm++2m" forces use_karras_sigmas = false, "dpm++2m-karras"
/// true). Throws dpinfer::Error for an unknown name (listing the valid ones), an
/// unsupported class, a scheduler of the wrong kind for `request.prediction` (listing the
/// right ones), or a config value dpinfer does not implement (naming the field).
std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const SchedulerRequest& request);

/// The names make_scheduler() accepts: pndm, ddim, euler, euler_a, dpm++2m, dpm++2m-karras, lms, unipc,
/// flow_match_euler.
std::vector<std::string> scheduler_names();

/// The names that step a denoiser predicting `prediction`: all but flow_match_euler for
/// kNoise, flow_match_euler for kFlowVelocity.
std::vector<std::string> scheduler_names(Prediction prediction);

/// The diffusers class a dpinfer scheduler name builds ("dpm++2m" -> "DPMSolverMultistepScheduler").
std::string scheduler_class(const std::string& name);

/// AUTOMATIC1111's sampler name for a dpinfer scheduler name ("dpm++2m-karras" -> "DPM++ 2M Karras").
std::string a1111_sampler_name(const std::string& name);

/// The config keys a dpinfer scheduler name sets whatever the model's config says, as JSON
/// ({"use_karras_sigmas": true}); every other key comes from the model's config or the
/// class default. For the README's --scheduler table.
nlohmann::json scheduler_fixed_keys(const std::string& name);

/// The config keys the diffusers class of scheduler `name` takes (its __init__ parameters in
/// diffusers 0.36.0, in their order); empty for an unknown name. from_config ignores others.
std::vector<std::string> scheduler_parameters(const std::string& name);

}  // namespace dpinfer::pipeline

#pragma once
// What the flow-matching pipelines (FLUX.1, FLUX.2, Qwen-Image, Z-Image, SD3) compute before
// they call FlowMatchEulerDiscreteScheduler.set_timesteps(): the sigmas they pass and the mu
// of dynamic shifting, in diffusers' own arithmetic, so a TimestepRequest built from them
// gives diffusers' timesteps bit for bit.
//
// The scheduler itself is the "flow_match_euler" row of make_scheduler(). A pipeline fills
// TimestepRequest as its diffusers counterpart calls set_timesteps():
//   - FluxPipeline, QwenImagePipeline: sigmas = flow_match_linear_sigmas(N), mu =
//     calculate_shift(image_seq_len, scheduler_config), steps = 0 (retrieve_timesteps passes
//     only the sigmas); mu is ignored unless the config has use_dynamic_shifting.
//   - Flux2Pipeline: the same sigmas, mu = compute_empirical_mu(image_seq_len, N).
//   - StableDiffusion3Pipeline: steps = N only (its double shift), mu only when the config
//     has use_dynamic_shifting.
//   - ZImagePipeline: steps = N, mu = calculate_shift(...) (ignored by Turbo's static config),
//     sigma_min = 0.0 (it sets `scheduler.sigma_min = 0.0` first).
// The model's timestep convention is the pipeline's job, not the scheduler's: FLUX and
// Qwen-Image feed timesteps()[i] / 1000, SD3 timesteps()[i] itself, Z-Image
// (1000 - timesteps()[i]) / 1000 and negates the model output before step().

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// diffusers' calculate_shift (pipelines/flux/pipeline_flux.py, copied into the Qwen-Image,
/// Z-Image and SD3 pipelines): mu linear in the packed image token count `image_seq_len`
/// ((H/16)·(W/16) for all of them), through (base_seq_len, base_shift) and (max_seq_len,
/// max_shift), in Python floats. Not clamped: a larger image extrapolates, as in diffusers.
double calculate_shift(int64_t image_seq_len, double base_seq_len, double max_seq_len, double base_shift,
                       double max_shift);

/// calculate_shift() with base_image_seq_len, max_image_seq_len, base_shift and max_shift read
/// from a scheduler_config.json as the pipelines read `scheduler.config` (absent or null:
/// FlowMatchEulerDiscreteScheduler's defaults 256, 4096, 0.5, 1.15). Throws dpinfer::Error
/// naming a field that is not a number.
double calculate_shift(int64_t image_seq_len, const nlohmann::json& scheduler_config);

/// diffusers' compute_empirical_mu (pipelines/flux2/pipeline_flux2.py): FLUX.2's mu from the
/// packed token count and the step count (above 4300 tokens, from the token count alone).
double compute_empirical_mu(int64_t image_seq_len, int64_t num_steps);

/// The sigmas FLUX.1, FLUX.2 and Qwen-Image pass: np.linspace(1.0, 1 / steps, steps), float64.
std::vector<double> flow_match_linear_sigmas(int64_t steps);

}  // namespace dpinfer::pipeline

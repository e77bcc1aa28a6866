#pragma once
// The two facts of a scheduler that a family row states (families/family_spec.h), free of LibTorch so that the
// torch-free layers can read the rows.

#include <nlohmann/json_fwd.hpp>

namespace dpinfer::pipeline {

/// A pipeline's own edits of its scheduler config, as diffusers' StableDiffusionPipeline
/// __init__ rewrites old configs (steps_offset -> 1, clip_sample -> false). It gets the
/// file's keys (those _use_default_values does not list) and whether the config's own
/// class is built (`own_class`) or another one by name, which from_config fills with its
/// own defaults wherever the file has no key.
using SchedulerConfigRewrite = void (*)(nlohmann::json& keys, bool own_class);

/// What a denoiser predicts, and so which schedulers can step with it: the UNet families
/// predict noise (epsilon or v) on a noise schedule; the DiT families of FLUX, SD3,
/// Qwen-Image and Z-Image predict a flow velocity. A scheduler of the other kind runs
/// without error and makes noise, so make_scheduler() refuses the pairing.
enum class Prediction { kNoise, kFlowVelocity };

}  // namespace dpinfer::pipeline

#pragma once
// --scheduler-set KEY=VALUE: keys of the model's scheduler config, given for one run, as
// diffusers users write `FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config,
// shift=3.0)` or pass a whole scheduler_config dict (Qwen-Image-Lightning's, SDXL-Lightning's
// timestep_spacing="trailing"). They act exactly as if scheduler_config.json held them.

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// Writes `settings` (an object of scheduler config keys) into `model`'s scheduler config,
/// dropping them from its `_use_default_values` list (which would otherwise send them back to
/// the class defaults), and checks them against the scheduler that `scheduler_name` (empty:
/// the config's own class) builds from the result. Throws InputError naming --scheduler-set
/// for a key that starts with '_' (the class is --scheduler's), a key that scheduler does not
/// read (a misspelt one: it would change nothing), a key the scheduler name fixes to another
/// value (dpm++2m's use_karras_sigmas), and a value the scheduler refuses.
void apply_scheduler_settings(ModelDir& model, const std::string& scheduler_name, const nlohmann::json& settings);

}  // namespace dpinfer::pipeline

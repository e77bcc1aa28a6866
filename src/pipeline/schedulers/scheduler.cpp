// Ref: diffusers/configuration_utils.py (from_config, extract_init_dict, register_to_config).
#include "dpinfer/pipeline/schedulers/scheduler.h"

#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dpinfer/util/error.h"
#include "factories.h"

namespace dpinfer::pipeline {
namespace {

using schedulers::ConfigReader;

/// One row per scheduler name. A new scheduler is a row here plus its own file.
struct SchedulerKind {
  const char* name;             ///< dpinfer's name, the --scheduler value
  const char* diffusers_class;  ///< the class it reproduces, as scheduler_config.json names it
  const char* a1111_label;      ///< AUTOMATIC1111's sampler name, for the infotext
  /// Keys the name sets whatever the config says: the name means A1111's sampler, so
  /// "dpm++2m" is never Karras even when the model's config asks for Karras sigmas.
  const char* fixed_keys;
  std::unique_ptr<Scheduler> (*make)(const ConfigReader& cfg, double eta);
  Prediction steps = Prediction::kNoise;  ///< the denoiser output it integrates
};

const SchedulerKind kKinds[] = {
    {"pndm", "PNDMScheduler", "PNDM", "{}", [](const ConfigReader& c, double) { return schedulers::make_pndm(c); }},
    {"ddim", "DDIMScheduler", "DDIM", "{}", schedulers::make_ddim},
    {"euler", "EulerDiscreteScheduler", "Euler", "{}",
     [](const ConfigReader& c, double) { return schedulers::make_euler(c); }},
    {"euler_a", "EulerAncestralDiscreteScheduler", "Euler a", "{}",
     [](const ConfigReader& c, double) { return schedulers::make_euler_ancestral(c); }},
    {"dpm++2m", "DPMSolverMultistepScheduler", "DPM++ 2M", R"({"use_karras_sigmas": false})",
     [](const ConfigReader& c, double) { return schedulers::make_dpm_solver_multistep(c); }},
    {"dpm++2m-karras", "DPMSolverMultistepScheduler", "DPM++ 2M Karras", R"({"use_karras_sigmas": true})",
     [](const ConfigReader& c, double) { return schedulers::make_dpm_solver_multistep(c); }},
    {"lms", "LMSDiscreteScheduler", "LMS", "{}", [](const ConfigReader& c, double) { return schedulers::make_lms(c); }},
    {"unipc", "UniPCMultistepScheduler", "UniPC", "{}",
     [](const ConfigReader& c, double) { return schedulers::make_unipc(c); }},
    // AUTOMATIC1111/Forge call flow-matching Euler on FLUX and SD3 plain "Euler".
    {"flow_match_euler", "FlowMatchEulerDiscreteScheduler", "Euler", "{}",
     [](const ConfigReader& c, double) { return schedulers::make_flow_match_euler(c); }, Prediction::kFlowVelocity},
};

/// The parameters of each class's __init__ in diffusers 0.36.0 (inspect.signature), the keys
/// from_config passes it; it ignores any other key of a config, with a warning.
const std::pair<const char*, const char*> kClassParameters[] = {
    {"PNDMScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas skip_prk_steps set_alpha_to_one "
     "prediction_type timestep_spacing steps_offset"},
    {"DDIMScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas clip_sample set_alpha_to_one steps_offset "
     "prediction_type thresholding dynamic_thresholding_ratio clip_sample_range sample_max_value timestep_spacing "
     "rescale_betas_zero_snr"},
    {"EulerDiscreteScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas prediction_type interpolation_type "
     "use_karras_sigmas use_exponential_sigmas use_beta_sigmas sigma_min sigma_max timestep_spacing timestep_type "
     "steps_offset rescale_betas_zero_snr final_sigmas_type"},
    {"EulerAncestralDiscreteScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas prediction_type timestep_spacing "
     "steps_offset rescale_betas_zero_snr"},
    {"DPMSolverMultistepScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas solver_order prediction_type thresholding "
     "dynamic_thresholding_ratio sample_max_value algorithm_type solver_type lower_order_final euler_at_final "
     "use_karras_sigmas use_exponential_sigmas use_beta_sigmas use_lu_lambdas use_flow_sigmas flow_shift "
     "final_sigmas_type lambda_min_clipped variance_type timestep_spacing steps_offset rescale_betas_zero_snr "
     "use_dynamic_shifting time_shift_type"},
    {"LMSDiscreteScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas use_karras_sigmas use_exponential_sigmas "
     "use_beta_sigmas prediction_type timestep_spacing steps_offset"},
    {"UniPCMultistepScheduler",
     "num_train_timesteps beta_start beta_end beta_schedule trained_betas solver_order prediction_type thresholding "
     "dynamic_thresholding_ratio sample_max_value predict_x0 solver_type lower_order_final disable_corrector solver_p "
     "use_karras_sigmas use_exponential_sigmas use_beta_sigmas use_flow_sigmas flow_shift timestep_spacing "
     "steps_offset final_sigmas_type rescale_betas_zero_snr use_dynamic_shifting time_shift_type"},
    {"FlowMatchEulerDiscreteScheduler",
     "num_train_timesteps shift use_dynamic_shifting base_shift max_shift base_image_seq_len max_image_seq_len "
     "invert_sigmas shift_terminal use_karras_sigmas use_exponential_sigmas use_beta_sigmas time_shift_type "
     "stochastic_sampling"},
};

const SchedulerKind* find_kind(const std::string& name) {
  for (const SchedulerKind& k : kKinds)
    if (name == k.name) return &k;
  return nullptr;
}

std::string joined_names() { return fmt::format("{}", fmt::join(scheduler_names(), ", ")); }

const char* prediction_text(Prediction p) {
  return p == Prediction::kNoise ? "noise (a diffusion UNet)" : "a flow velocity (a flow-matching transformer)";
}

// The file as from_config sees it: keys a saved config lists in _use_default_values were
// defaults, not values, and are dropped.
nlohmann::json file_keys(const nlohmann::json& config) {
  nlohmann::json out = config;
  auto it = config.find("_use_default_values");
  if (it != config.end()) {
    if (it->is_array()) {
      for (const auto& key : *it) {
        if (key.is_string()) out.erase(key.get<std::string>());
      }
    }
    out.erase("_use_default_values");
  }
  return out;
}

/// The name the config's own class gets: its class's row, and among the DPM-Solver rows
/// the one its use_karras_sigmas picks.
std::string own_name(const nlohmann::json& keys) {
  auto cls = keys.find("_class_name");
  if (cls == keys.end() || !cls->is_string())
    throw Error(fmt::format(
        "scheduler_config.json: _class_name is missing or not a string; add it or choose a scheduler by name ({})",
        joined_names()));
  const std::string class_name = cls->get<std::string>();
  const SchedulerKind* first = nullptr;
  for (const SchedulerKind& k : kKinds) {
    if (class_name != k.diffusers_class) continue;
    if (!first) first = &k;
    bool matches = true;
    const nlohmann::json fixed = nlohmann::json::parse(k.fixed_keys);
    for (const auto& [key, value] : fixed.items()) {
      auto it = keys.find(key);
      matches = matches && (it == keys.end() || it->is_null() ? nlohmann::json(false) : *it) == value;
    }
    if (matches) return k.name;
  }
  // A value of the wrong type matches no row: the class's first row reports it.
  if (first) return first->name;
  throw Error(fmt::format(
      "scheduler_config.json: _class_name '{}' is not supported; choose a scheduler by name ({})", class_name,
      joined_names()));
}

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> out;
  for (const SchedulerKind& k : kKinds) out.emplace_back(k.name);
  return out;
}

std::vector<std::string> scheduler_names(Prediction prediction) {
  std::vector<std::string> out;
  for (const SchedulerKind& k : kKinds)
    if (k.steps == prediction) out.emplace_back(k.name);
  return out;
}

std::string scheduler_class(const std::string& name) {
  const SchedulerKind* k = find_kind(name);
  return k ? k->diffusers_class : "";
}

std::string a1111_sampler_name(const std::string& name) {
  const SchedulerKind* k = find_kind(name);
  return k ? k->a1111_label : name;
}

std::vector<std::string> scheduler_parameters(const std::string& name) {
  const SchedulerKind* k = find_kind(name);
  std::vector<std::string> out;
  for (const auto& [cls, params] : kClassParameters) {
    if (!k || std::string(cls) != k->diffusers_class) continue;
    std::istringstream words(params);
    for (std::string w; words >> w;) out.push_back(w);
  }
  return out;
}

nlohmann::json scheduler_fixed_keys(const std::string& name) {
  const SchedulerKind* k = find_kind(name);
  return k ? nlohmann::json::parse(k->fixed_keys) : nlohmann::json::object();
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const SchedulerRequest& request) {
  if (!config.is_object()) {
    throw Error(fmt::format("scheduler_config.json: expected a json object, got {}; fix the file", config.type_name()));
  }
  if (!std::isfinite(request.eta) || request.eta < 0) {
    throw Error(fmt::format("scheduler eta must be a finite number >= 0, got {}", request.eta));
  }
  nlohmann::json keys = file_keys(config);
  const bool own_class = request.name.empty();
  if (!own_class && !find_kind(request.name))
    throw Error(fmt::format("unknown scheduler '{}'; valid: {}", request.name, joined_names()));
  if (request.rewrite) request.rewrite(keys, own_class);
  const std::string name = own_class ? own_name(keys) : request.name;
  const SchedulerKind& kind = *find_kind(name);
  if (kind.steps != request.prediction) {
    throw Error(fmt::format(
        "scheduler '{}' ({}{}) steps a model that predicts {}, but this model predicts {}; choose one of: {}", name,
        kind.diffusers_class, own_class ? ", the config's own _class_name" : "", prediction_text(kind.steps),
        prediction_text(request.prediction), fmt::join(scheduler_names(request.prediction), ", ")));
  }
  const nlohmann::json fixed = nlohmann::json::parse(kind.fixed_keys);
  for (const auto& [key, value] : fixed.items()) keys[key] = value;
  return kind.make(ConfigReader(keys, name), request.eta);
}

}  // namespace dpinfer::pipeline

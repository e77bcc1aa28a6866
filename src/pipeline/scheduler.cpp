// Ref: diffusers/configuration_utils.py (from_config, extract_init_dict, register_to_config),
//      diffusers/pipelines/stable_diffusion/pipeline_stable_diffusion.py (__init__'s config rewrite).
#include "dpinfer/pipeline/scheduler.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dpinfer/util/error.h"
#include "schedulers/factories.h"

namespace dpinfer::pipeline {
namespace {

using schedulers::ConfigReader;

struct Kind {
  const char* name;
  const char* diffusers_class;
};

constexpr Kind kKinds[] = {
    {"pndm", "PNDMScheduler"},
    {"ddim", "DDIMScheduler"},
    {"euler", "EulerDiscreteScheduler"},
    {"euler_a", "EulerAncestralDiscreteScheduler"},
    {"dpm++2m", "DPMSolverMultistepScheduler"},
    {"dpm++2m-karras", "DPMSolverMultistepScheduler"},
    {"lms", "LMSDiscreteScheduler"},
    {"unipc", "UniPCMultistepScheduler"},
};

std::string joined_names() { return fmt::format("{}", fmt::join(scheduler_names(), ", ")); }

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

std::unique_ptr<Scheduler> build(const std::string& name, const nlohmann::json& config, double eta) {
  ConfigReader cfg(config, name);
  if (name == "pndm") return schedulers::make_pndm(cfg);
  if (name == "ddim") return schedulers::make_ddim(cfg, eta);
  if (name == "euler") return schedulers::make_euler(cfg);
  if (name == "euler_a") return schedulers::make_euler_ancestral(cfg);
  if (name == "dpm++2m" || name == "dpm++2m-karras") return schedulers::make_dpm_solver_multistep(cfg);
  if (name == "lms") return schedulers::make_lms(cfg);
  return schedulers::make_unipc(cfg);
}

}  // namespace

std::vector<std::string> scheduler_names() {
  std::vector<std::string> out;
  for (const Kind& k : kKinds) out.emplace_back(k.name);
  return out;
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& override_name, double eta) {
  if (!config.is_object()) {
    throw Error(fmt::format("scheduler_config.json: expected a json object, got {}; fix the file", config.type_name()));
  }
  if (!std::isfinite(eta) || eta < 0) {
    throw Error(fmt::format("scheduler eta must be a finite number >= 0, got {}", eta));
  }
  nlohmann::json resolved = file_keys(config);

  std::string name;
  if (override_name.empty()) {
    auto cls = resolved.find("_class_name");
    if (cls == resolved.end() || !cls->is_string()) {
      throw Error(
          fmt::format("scheduler_config.json: _class_name is missing or not a string; add it or choose a "
                      "scheduler by name ({})",
                      joined_names()));
    }
    const std::string class_name = cls->get<std::string>();
    for (const Kind& k : kKinds) {
      if (class_name == k.diffusers_class) {
        name = k.name;
        break;
      }
    }
    if (name.empty()) {
      throw Error(
          fmt::format("scheduler_config.json: _class_name '{}' is not supported; choose a scheduler by name "
                      "({})",
                      class_name, joined_names()));
    }
    // The pipeline's rewrite: after it steps_offset is 1 and clip_sample false, whatever the
    // file or the class default said.
    resolved["steps_offset"] = 1;
    resolved["clip_sample"] = false;
    if (name == "dpm++2m") {
      const nlohmann::json& karras = resolved.value("use_karras_sigmas", nlohmann::json(false));
      if (karras.is_boolean() && karras.get<bool>()) name = "dpm++2m-karras";
    }
  } else {
    for (const Kind& k : kKinds) {
      if (override_name == k.name) name = k.name;
    }
    if (name.empty()) throw Error(fmt::format("unknown scheduler '{}'; valid: {}", override_name, joined_names()));
    // The rewrite changed only keys the file has; the defaults it rewrote stay listed in
    // _use_default_values, so from_config drops them and the target's defaults apply.
    auto offset = resolved.find("steps_offset");
    if (offset != resolved.end() && !(offset->is_number() && offset->get<double>() == 1)) resolved["steps_offset"] = 1;
    auto clip = resolved.find("clip_sample");
    if (clip != resolved.end() && clip->is_boolean() && clip->get<bool>()) resolved["clip_sample"] = false;
    if (name == "dpm++2m") resolved["use_karras_sigmas"] = false;
    if (name == "dpm++2m-karras") resolved["use_karras_sigmas"] = true;
  }
  return build(name, resolved, eta);
}

}  // namespace dpinfer::pipeline

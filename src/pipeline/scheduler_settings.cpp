#include "dpinfer/pipeline/scheduler_settings.h"

#include <algorithm>
#include <vector>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

void apply_scheduler_settings(ModelDir& model, const std::string& scheduler_name, const nlohmann::json& settings) {
  if (!settings.is_object() || settings.empty()) return;
  Component* scheduler = nullptr;
  for (Component& c : model.components)
    if (c.role == ComponentRole::kScheduler) scheduler = &c;
  if (!scheduler) throw InputError("--scheduler-set: " + model.name + " has no scheduler component to set keys of");
  nlohmann::json& config = scheduler->config;
  for (const auto& [key, value] : settings.items()) {
    if (!key.empty() && key[0] == '_')
      throw InputError("--scheduler-set " + printable(key, 60) + ": keys that start with '_' are not settings" +
                       (key == "_class_name" ? "; choose the scheduler class with --scheduler" : ""));
    config[key] = value;
  }
  // A key named in _use_default_values is reset to the class default by from_config (it
  // was one when the file was saved); one given here is not a default any more.
  if (auto d = config.find("_use_default_values"); d != config.end() && d->is_array()) {
    nlohmann::json kept = nlohmann::json::array();
    for (const nlohmann::json& k : *d)
      if (!k.is_string() || !settings.contains(k.get<std::string>())) kept.push_back(k);
    *d = kept;
  }

  // The scheduler the run builds, which also checks the values as it reads them.
  const Family& family = *model.family;
  std::string name;
  try {
    name = make_scheduler(config, {scheduler_name, 0.0, family.scheduler_rewrite, family.prediction})->name();
  } catch (const Error& e) {
    throw InputError(std::string("--scheduler-set: ") + e.what());
  }
  const std::vector<std::string> parameters = scheduler_parameters(name);
  const nlohmann::json fixed = scheduler_fixed_keys(name);
  for (const auto& [key, value] : settings.items()) {
    // from_config would ignore it (a misspelt key): the run would not be what was asked for.
    if (std::find(parameters.begin(), parameters.end(), key) == parameters.end())
      throw InputError("--scheduler-set " + printable(key, 60) + ": not a parameter of diffusers' " +
                       scheduler_class(name) + " (the " + name + " scheduler); its parameters: " + join(parameters));
    if (auto f = fixed.find(key); f != fixed.end() && *f != value) {
      std::string other;  // the name of this class that sets it so, if there is one
      for (const std::string& n : scheduler_names())
        if (scheduler_class(n) == scheduler_class(name) && scheduler_fixed_keys(n).value(key, nlohmann::json()) == value)
          other = n;
      throw InputError("--scheduler-set " + printable(key, 60) + "=" + io::json_brief(value) + ": --scheduler " +
                       name + " sets it to " + f->dump() + ", as the AUTOMATIC1111 sampler of that name does; " +
                       (other.empty() ? "leave it out" : "give --scheduler " + other + " instead"));
    }
  }
}

}  // namespace dpinfer::pipeline

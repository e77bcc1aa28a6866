#include "component_residency.h"

#include <c10/core/InferenceMode.h>

#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {

void ComponentResidency::add(Group group, std::string name, std::function<void()> release,
                             std::function<torch::nn::Module&()> load, std::function<bool()> resident,
                             LoraMerger* lora) {
  slots_.push_back({group, std::move(name), std::move(release), std::move(load), std::move(resident), lora});
}

void ComponentResidency::enter(Group group) {
  if (!two_phase_) return;
  c10::InferenceMode guard;
  for (Slot& s : slots_) {
    if (s.group == group || !s.resident()) continue;
    if (s.lora) s.lora->detach(s.name);
    s.release();
    log::debug("released {} from the device", s.name);
  }
  for (Slot& s : slots_) {
    if (s.group != group || s.resident()) continue;
    torch::nn::Module& module = s.load();
    if (s.lora) s.lora->reattach(s.name, module);
    log::debug("loaded {} again", s.name);
  }
}

std::vector<std::string> ComponentResidency::resident() const {
  std::vector<std::string> names;
  for (const Slot& s : slots_)
    if (s.resident()) names.push_back(s.name);
  return names;
}

}  // namespace dpinfer::pipeline

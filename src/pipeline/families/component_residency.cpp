#include "component_residency.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "dpinfer/pipeline/device_memory.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/nn/offload.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline {

void ComponentResidency::add(Group group, std::string name, std::function<void()> release,
                             std::function<torch::nn::Module&()> load, std::function<torch::nn::Module*()> module,
                             LoraMerger* lora, bool on_device) {
  const bool loaded = module() != nullptr;  // before the move below
  slots_.push_back({group, std::move(name), std::move(release), std::move(load), std::move(module), lora,
                    on_device && loaded});
}

void ComponentResidency::close_phase(const char* next) const {
  const std::string device = device_.str();
  if (!DeviceMemory::counting(device)) return;
  int64_t& peak = phase_peaks_[phase_];
  peak = std::max(peak, DeviceMemory::peak_bytes(device));
  if (next) {
    DeviceMemory::reset_peak(device);
    phase_ = next;
  }
}

std::map<std::string, int64_t> ComponentResidency::phase_peaks() const {
  close_phase(nullptr);
  return phase_peaks_;
}

void ComponentResidency::enter(Group group) {
  close_phase(group == Group::kTextEncoders ? "encode" : group == Group::kDenoiser ? "denoise" : "decode");
  if (!two_phase_ && !model_offload_) return;
  c10::InferenceMode guard;
  make_room(group);
  for (Slot& s : slots_) {
    if (s.group != group) continue;
    if (!s.module()) {
      torch::nn::Module& module = s.load();
      if (s.lora) s.lora->reattach(s.name, module);
      s.on_device = !model_offload_;  // model offload loads into host memory
      log::debug("loaded {} again", s.name);
    }
    if (model_offload_ && !s.on_device) {
      // then module.to(execution_device)
      bytes_to_device_ += nn::move_module(*s.module(), device_);
      ++moves_to_device_;
      s.on_device = true;
      log::debug("moved {} to the device", s.name);
    }
  }
}

void ComponentResidency::make_room(Group group) {
  if (!two_phase_ && !model_offload_) return;
  c10::InferenceMode guard;
  // Two-phase frees the other of the text encoders and the denoiser, and the VAE for the text encoders (nothing
  // for the VAE: an image encode may follow the text encoders, as SD's does).
  const auto releases = [&](const Slot& s) {
    return two_phase_ && group != Group::kVae && s.group != group &&
           (s.group != Group::kVae || group == Group::kTextEncoders);
  };
  for (Slot& s : slots_) {
    if (s.group == group || !s.module()) continue;
    if (releases(s)) {
      if (s.lora) s.lora->detach(s.name);
      s.release();
      s.on_device = false;
      log::debug("released {} from the device", s.name);
    } else if (model_offload_ && s.on_device) {
      // accelerate's CpuOffload.pre_forward: prev_module_hook.offload() first.
      nn::move_module(*s.module(), c10::Device(c10::kCPU));
      s.on_device = false;
      log::debug("moved {} to host memory", s.name);
    }
  }
}

std::vector<std::string> ComponentResidency::resident() const {
  std::vector<std::string> names;
  for (const Slot& s : slots_)
    if (s.group != Group::kVae && s.module()) names.push_back(s.name);
  return names;
}

std::vector<std::string> ComponentResidency::on_device() const {
  std::vector<std::string> names;
  for (const Slot& s : slots_)
    if (s.on_device) names.push_back(s.name);
  return names;
}

}  // namespace dpinfer::pipeline

#pragma once
// Which of a pipeline's modules are on its device (issue 26, two-phase chunks). Without two-phase
// every module stays resident from load to exit, as it always has. With it, the text encoders and
// the denoiser are never resident together: enter(kTextEncoders) releases the denoiser and the VAE and
// brings the encoders back, enter(kDenoiser) the other way round, and enter(kVae) brings the VAE back
// beside whatever is resident (SD encodes an init image before its encoders leave). The load leaves
// the encoders resident and the denoiser and VAE not yet loaded (their files checked), so that a run of
// one chunk loads each module once, as without two-phase: the encoders run alone, with nothing beside
// them but the chunk's encodings (the VAE is small, 0.17 GB of FLUX.1's 33.7 in bf16, but it was what
// stood between Qwen-Image's cut shape and issue 26's 0.45x goal).
//
// Released means freed, on every device: the module and every handle to its weights are dropped
// (the LoRA merger's too, LoraMerger::detach), so the memory goes back to the allocator; bringing
// it back loads it again from its files, as the load did, and merges the LoRAs in place into it
// (LoraMerger::reattach). On a CUDA device dpinfer frees rather than parking the weights in pinned
// host memory: the files are in the page cache, which the node's ranks share, where a pinned copy
// would be one per rank that the kernel cannot page out, and the host memory is what holds the
// chunk's encodings.
//
// Model offload (--offload model, issue 26 item 4) is the other half of where a module lives: every
// slot, the VAE's too (kVae), is loaded into host memory and moved whole to the device only while it
// runs, as diffusers' enable_model_cpu_offload (accelerate's cpu_offload_with_hook chained
// text_encoder -> text_encoder_2 -> ... -> transformer -> vae: a module's pre_forward first moves the
// module before it back to the CPU, then itself to the device). enter(group) is that pre_forward for
// a group: the slots of the other groups that are on the device go back to (pinned) host memory, then
// this group's come to the device. The text encoders of a pipeline move together (diffusers moves
// them one by one); a family's encoders are run back to back, and all but T5 and the Qwen models are
// small. With two-phase as well, its releases (freed, as above) come first; model offload decides
// where the rest are.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

class LoraMerger;

class ComponentResidency {
 public:
  enum class Group { kTextEncoders, kDenoiser, kVae };

  /// `two_phase`: one of the text encoders and the denoiser at a time; `model_offload`: each group on
  /// `device` only while it runs (above). With neither, enter() does nothing and every slot stays
  /// resident on the device.
  explicit ComponentResidency(bool two_phase = false, bool model_offload = false,
                              c10::Device device = c10::Device(c10::kCPU))
      : two_phase_(two_phase), model_offload_(model_offload), device_(device) {}

  bool two_phase() const { return two_phase_; }
  bool model_offload() const { return model_offload_; }

  /// Registers a module (resident, just loaded, or not loaded yet) and how to drop and load it again. `lora`: the
  /// merger that registered it, detached and reattached with it, or null. `module`: the module, null while released.
  /// With model offload a module just loaded is where it was loaded (load() puts it in host memory).
  void add(Group group, std::string name, std::function<void()> release,
           std::function<torch::nn::Module&()> load, std::function<torch::nn::Module*()> module, LoraMerger* lora,
           bool on_device);

  /// Makes `group` the one that runs: with two-phase, the other of the text encoders and the denoiser is
  /// released first, then this group's slots are loaded where released; with model offload, the other
  /// groups' slots on the device go to host memory, then this group's come to the device. Under its own
  /// InferenceMode.
  void enter(Group group);
  /// enter()'s first half: the other groups' slots released or moved to host memory, before a
  /// module of `group` is loaded (the load puts it where its group is brought by enter()).
  void make_room(Group group);

  /// The names of the resident (loaded) text encoder and denoiser slots, in the order they were added.
  std::vector<std::string> resident() const;
  /// The names of the slots on the device, in the order they were added.
  std::vector<std::string> on_device() const;
  /// With the device's allocations counted (--max-device-memory, device_memory.h): the most bytes allocated
  /// at once in each phase so far, {"load", "encode", "denoise", "decode"}; empty when not counted. A phase
  /// runs from one enter() to the next.
  std::map<std::string, int64_t> phase_peaks() const;
  /// Model offload's moves so far: to the device, and the bytes they moved.
  int64_t moves_to_device() const { return moves_to_device_; }
  int64_t bytes_to_device() const { return bytes_to_device_; }

 private:
  struct Slot {
    Group group;
    std::string name;
    std::function<void()> release;
    std::function<torch::nn::Module&()> load;
    std::function<torch::nn::Module*()> module;
    LoraMerger* lora = nullptr;
    bool on_device = false;
  };
  bool two_phase_;
  bool model_offload_;
  c10::Device device_;
  std::vector<Slot> slots_;
  int64_t moves_to_device_ = 0, bytes_to_device_ = 0;
  /// phase_peaks()'s record: closes the phase running now (its peak since the last enter()) before `next`.
  void close_phase(const char* next) const;
  mutable std::map<std::string, int64_t> phase_peaks_;
  mutable std::string phase_ = "load";
};

}  // namespace dpinfer::pipeline

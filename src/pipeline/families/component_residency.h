#pragma once
// Which of a pipeline's modules are on its device (issue 26, two-phase chunks). Without two-phase
// every module stays resident from load to exit, as it always has. With it, the text encoders and
// the denoiser are never resident together: enter(kTextEncoders) releases the denoiser and brings
// the encoders back, enter(kDenoiser) the other way round. The load leaves the encoders resident and
// the denoiser not yet loaded (its files checked), so that a run of one chunk loads each module once,
// as without two-phase. The VAE is no slot: it stays.
//
// Released means freed, on every device: the module and every handle to its weights are dropped
// (the LoRA merger's too, LoraMerger::detach), so the memory goes back to the allocator; bringing
// it back loads it again from its files, as the load did, and merges the LoRAs in place into it
// (LoraMerger::reattach). On a CUDA device dpinfer frees rather than parking the weights in pinned
// host memory: the files are in the page cache, which the node's ranks share, where a pinned copy
// would be one per rank that the kernel cannot page out, and the host memory is what holds the
// chunk's encodings.

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

class LoraMerger;

class ComponentResidency {
 public:
  enum class Group { kTextEncoders, kDenoiser };

  /// `two_phase`: one group at a time; else enter() does nothing and every slot stays resident.
  explicit ComponentResidency(bool two_phase = false) : two_phase_(two_phase) {}

  bool two_phase() const { return two_phase_; }

  /// Registers a module (resident, just loaded, or not loaded yet) and how to drop and load it again. `lora`: the
  /// merger that registered it, detached and reattached with it, or null.
  void add(Group group, std::string name, std::function<void()> release,
           std::function<torch::nn::Module&()> load, std::function<bool()> resident, LoraMerger* lora);

  /// With two-phase, makes `group` the resident one: the other group's modules are released first,
  /// then this group's are loaded where released. Under its own InferenceMode.
  void enter(Group group);

  /// The names of the resident slots, in the order they were added.
  std::vector<std::string> resident() const;

 private:
  struct Slot {
    Group group;
    std::string name;
    std::function<void()> release;
    std::function<torch::nn::Module&()> load;
    std::function<bool()> resident;
    LoraMerger* lora = nullptr;
  };
  bool two_phase_;
  std::vector<Slot> slots_;
};

}  // namespace dpinfer::pipeline

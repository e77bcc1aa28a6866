#pragma once
// Where a module's weights live between uses (issue 26 item 4, --offload): moving a whole module
// between the host and the device (--offload model), and groups of a transformer's blocks kept in
// host memory and brought to the device one group ahead of their use (--offload blocks).
//
// A move replaces each parameter's and buffer's data in place (Tensor::set_data, as
// torch::nn::Module::to does), so every handle to a weight (the module's own members, the LoRA
// merger's) follows it, and keeps its dtype and strides: float8 storage and GGUF's uint8 blocks
// (WeightedLayer) move as stored, never as a copy in the compute dtype. On the host a weight that
// came from a CUDA device is in pinned memory, and so is a block offloaded for a CUDA device, so that
// the copies are DMAs the GPU can overlap with its compute.
// On a CPU run the device is the host: the moves are copies from the host to the host, which keep
// the bookkeeping of a GPU run and save nothing.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/nn/module.h>

namespace dpinfer::pipeline::nn {

/// Moves every parameter and buffer of `module` (recursively) to `device`, in place. To the host
/// from another device: into pinned memory. Blocking. Returns the bytes moved.
int64_t move_module(torch::nn::Module& module, const at::Device& device);

/// The bytes of `module`'s parameters and buffers (recursively), as stored.
int64_t module_bytes(const torch::nn::Module& module);

/// Groups of blocks offloaded to the host, after diffusers' apply_group_offloading(module,
/// offload_type="block_level", num_blocks_per_group=N, use_stream=True) (diffusers 0.36,
/// hooks/group_offloading.py, _apply_group_offloading_block_level): each block list (a
/// torch::nn::ModuleList child of the model, the ones diffusers matches, named by the model in the
/// order its forward runs them) is cut into groups of N consecutive blocks (the last group of a list
/// may be shorter; a group never spans two lists). Everything else in the model (embedders, norms,
/// proj_out) is moved to the device and stays there; diffusers moves it per forward (its unmatched
/// group), which changes no value.
///
/// Between uses a block's weights are in host memory (pinned for a CUDA device, whatever memory the
/// model was loaded into), held by this object for its life.
/// Before block i of group k runs (before()), group k's weights are on the device, and group k+1's
/// copy is issued on a side stream (diffusers' lazy prefetch: the next group in execution order);
/// after the last block of group k (after()), its device copies are dropped. So at most two groups
/// are on the device at a time. On CUDA the copies run on a stream of their own: an event recorded
/// after a group's copies is waited for on the compute stream before the group's first block (the
/// compute stream never reads a half-copied weight), each device copy is recorded as used by the
/// compute stream (so the caching allocator does not hand its memory to the next copy before the
/// kernels reading it have run), and the host copies outlive every copy in flight. Elsewhere (the
/// CPU) the same copies are made synchronously.
class BlockOffload {
 public:
  /// Takes the blocks of `model`'s ModuleList children `lists` (or descendants, "encoder.block"), `per_group` a
  /// group, to the host, and the rest of `model` to `device`. Error for a name that is no ModuleList or
  /// per_group < 1.
  BlockOffload(torch::nn::Module& model, const std::vector<std::string>& lists, const at::Device& device,
               int64_t per_group);
  ~BlockOffload();
  BlockOffload(const BlockOffload&) = delete;
  BlockOffload& operator=(const BlockOffload&) = delete;

  /// Call before `block` runs: its group is on the device once this returns (for the compute
  /// stream), and the next group's copy is under way. A block of no group is refused (Error).
  void before(const torch::nn::Module& block);
  /// Call after `block` ran: the last block of its group drops the group's device copies.
  void after(const torch::nn::Module& block);
  /// Call when the model's forward ends (normally or not): every group still on the device (a
  /// prefetched group that a First Block Cache skip never ran) is dropped, so that between forwards
  /// every block's weights are the host copies (where a LoRA merge changes them).
  void end_forward();

  int64_t per_group() const { return per_group_; }
  int64_t groups() const { return static_cast<int64_t>(groups_.size()); }
  /// The accounting: groups on the device now, the most there ever were, copies to the device made.
  int64_t resident_groups() const;
  int64_t max_resident_groups() const { return max_resident_; }
  int64_t copies_to_device() const { return copies_; }
  /// The bytes of the blocks' weights (host copies) and of the largest group.
  int64_t offloaded_bytes() const { return offloaded_bytes_; }
  int64_t largest_group_bytes() const { return largest_group_bytes_; }

 private:
  struct Weight {
    at::Tensor param;  ///< the module's tensor: its data is the host copy or the device copy
    at::Tensor host;   ///< the host copy, kept for the object's life
    at::Tensor device; ///< the device copy while the group is on the device, else undefined
  };
  struct Group {
    std::vector<Weight> weights;
    std::vector<const torch::nn::Module*> blocks;
    bool on_device = false;
    std::optional<c10::Event> copied;  ///< recorded on the side stream after the group's copies (CUDA)
  };
  void onload(Group& g);
  void offload(Group& g);
  std::pair<size_t, size_t> find(const torch::nn::Module& block) const;  ///< (group, position in it)

  at::Device device_;
  int64_t per_group_;
  std::vector<Group> groups_;
  std::optional<c10::Stream> side_, compute_;  ///< CUDA only
  int64_t max_resident_ = 0, copies_ = 0, offloaded_bytes_ = 0, largest_group_bytes_ = 0;
};

/// Calls before() on construction and after() on destruction, when `offload` is set.
class BlockOnDevice {
 public:
  BlockOnDevice(BlockOffload* offload, const torch::nn::Module& block);
  ~BlockOnDevice();
  BlockOnDevice(const BlockOnDevice&) = delete;
  BlockOnDevice& operator=(const BlockOnDevice&) = delete;

 private:
  BlockOffload* offload_;
  const torch::nn::Module& block_;
};

/// Calls end_forward() on destruction, when `offload` is set: one at the top of a model's forward.
class OffloadedForward {
 public:
  explicit OffloadedForward(BlockOffload* offload) : offload_(offload) {}
  ~OffloadedForward();
  OffloadedForward(const OffloadedForward&) = delete;
  OffloadedForward& operator=(const OffloadedForward&) = delete;

 private:
  BlockOffload* offload_;
};

/// What a transformer whose block loops take BlockOffload inherits (beside torch::nn::Module): the
/// family's loader turns it on (LoraPipeline, --offload blocks), the forward reads it.
class OffloadableBlocks {
 public:
  virtual ~OffloadableBlocks() = default;
  /// Offloads `model`'s (the transformer's own) blocks, `per_group` a group, to the host.
  void offload_blocks(torch::nn::Module& model, const at::Device& device, int64_t per_group) {
    block_offload_ = std::make_unique<BlockOffload>(model, block_lists(), device, per_group);
  }
  /// The names of the model's block lists, in the order its forward runs them (diffusers'
  /// transformer_blocks, single_transformer_blocks, ...): children of the model, or dotted paths to
  /// descendants (a text encoder's "encoder.block").
  virtual std::vector<std::string> block_lists() const = 0;
  /// Null unless offload_blocks() was called.
  BlockOffload* block_offload() const { return block_offload_.get(); }

 private:
  std::unique_ptr<BlockOffload> block_offload_;
};

}  // namespace dpinfer::pipeline::nn

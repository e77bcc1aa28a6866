// Ref: diffusers 0.36 hooks/group_offloading.py (ModuleGroup.onload_/offload_, GroupOffloadingHook,
// LazyPrefetchGroupOffloadingHook, _apply_group_offloading_block_level) and accelerate's
// cpu_offload_with_hook (module.to(device) before, module.to("cpu") after): see offload.h.
#include "dpinfer/pipeline/nn/offload.h"

#include <algorithm>
#include <unordered_set>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace dpinfer::pipeline::nn {
namespace {

/// Each distinct parameter and buffer of `module` (a tied weight once), as handles sharing its TensorImpl.
std::vector<at::Tensor> offload_tensors_of(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const at::Tensor& t : module.parameters(/*recurse=*/true))
    if (t.defined() && seen.insert(t.unsafeGetTensorImpl()).second) out.push_back(t);
  for (const at::Tensor& t : module.buffers(/*recurse=*/true))
    if (t.defined() && seen.insert(t.unsafeGetTensorImpl()).second) out.push_back(t);
  return out;
}

/// A copy of `t` on `device` with its dtype and strides, in pinned memory when `pin` (a host copy
/// for a CUDA device: only a pinned source lets a copy to the device run asynchronously).
at::Tensor offload_copy_to(const at::Tensor& t, const at::Device& device, bool pin) {
  at::Tensor out = at::empty_strided(t.sizes(), t.strides(), t.options().device(device).pinned_memory(pin));
  out.copy_(t);
  return out;
}

}  // namespace

int64_t move_module(torch::nn::Module& module, const at::Device& device) {
  int64_t bytes = 0;
  for (at::Tensor& t : offload_tensors_of(module)) {
    // accelerate's module.to(device): the data replaced in place, so every handle follows. Back to the
    // host from a device: into pinned memory.
    t.set_data(offload_copy_to(t, device, device.is_cpu() && !t.device().is_cpu()));
    bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

int64_t module_bytes(const torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const at::Tensor& t : offload_tensors_of(module)) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

BlockOffload::BlockOffload(torch::nn::Module& model, const std::vector<std::string>& lists, const at::Device& device,
                           int64_t per_group)
    : device_(device), per_group_(per_group) {
  if (per_group < 1) throw Error("block offload: expected 1 or more blocks a group, got " + std::to_string(per_group));
  std::unordered_set<const c10::TensorImpl*> in_blocks;
  for (const std::string& name : lists) {
    // A child of the model, or a dotted path to a descendant (T5's "encoder.block"), as named_modules names it.
    const auto modules = model.named_modules("", /*include_self=*/false);
    const std::shared_ptr<torch::nn::Module>* found = modules.find(name);
    auto* list = found ? dynamic_cast<torch::nn::ModuleListImpl*>(found->get()) : nullptr;
    if (!list) throw Error("block offload: " + name + " is no ModuleList");
    for (size_t first = 0; first < list->size(); first += static_cast<size_t>(per_group)) {
      Group g;
      const size_t end = std::min(list->size(), first + static_cast<size_t>(per_group));
      int64_t group_bytes = 0;
      for (size_t i = first; i < end; ++i) {
        const std::shared_ptr<torch::nn::Module> block = list->ptr(i);
        g.blocks.push_back(block.get());
        for (const at::Tensor& t : offload_tensors_of(*block)) {
          if (!in_blocks.insert(t.unsafeGetTensorImpl()).second) continue;
          // diffusers keeps the CPU copies of a group's tensors for its life (cpu_param_dict), pinned
          // with use_stream; the module's own tensor then holds them between uses.
          Weight w{t, offload_copy_to(t, at::Device(at::kCPU), /*pin=*/device_.is_cuda()), {}};
          w.param.set_data(w.host);
          group_bytes += static_cast<int64_t>(w.host.nbytes());
          g.weights.push_back(std::move(w));
        }
      }
      offloaded_bytes_ += group_bytes;
      largest_group_bytes_ = std::max(largest_group_bytes_, group_bytes);
      groups_.push_back(std::move(g));
    }
  }
  // Everything outside the block lists goes to the device and stays there.
  for (at::Tensor& t : offload_tensors_of(model))
    if (!in_blocks.count(t.unsafeGetTensorImpl()) && t.device() != device_)
      t.set_data(offload_copy_to(t, device_, /*pin=*/false));
  if (device_.is_cuda()) {
    c10::impl::VirtualGuardImpl impl(device_.type());
    side_.emplace(impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/false));
  }
}

BlockOffload::~BlockOffload() {
  // The host copies go with this object: no copy from them may still be in flight.
  for (Group& g : groups_)
    if (g.copied) {
      try {
        g.copied->synchronize();
      } catch (...) {
      }
    }
}

std::pair<size_t, size_t> BlockOffload::find(const torch::nn::Module& block) const {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t k = 0; k < groups_[gi].blocks.size(); ++k)
      if (groups_[gi].blocks[k] == &block) return {gi, k};
  throw Error("block offload: a block outside the offloaded lists was run");
}

void BlockOffload::onload(Group& g) {
  // ModuleGroup.onload_ with a stream: the copies are issued on the side stream, non_blocking from
  // pinned memory; the event lets the compute stream wait for exactly these copies.
  std::optional<c10::StreamGuard> on_side;
  if (side_) on_side.emplace(*side_);
  for (Weight& w : g.weights) {
    w.device = at::empty_strided(w.host.sizes(), w.host.strides(), w.host.options().device(device_));
    w.device.copy_(w.host, /*non_blocking=*/side_.has_value());
    w.param.set_data(w.device);
  }
  if (side_) {
    g.copied.emplace(device_.type());
    g.copied->record(*side_);
  }
  g.on_device = true;
  ++copies_;
}

void BlockOffload::offload(Group& g) {
  // ModuleGroup.offload_: param.data = the CPU copy; the device copy is dropped. With a stream its
  // memory is first marked used by the compute stream (record_stream), so that the allocator reuses
  // it only once the kernels queued there have read it.
  std::optional<c10::Stream> compute;
  if (side_) compute.emplace(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
  for (Weight& w : g.weights) {
    if (compute && w.device.defined()) w.device.record_stream(*compute);
    w.param.set_data(w.host);
    w.device.reset();
  }
  g.on_device = false;
}

void BlockOffload::before(const torch::nn::Module& block) {
  const auto [gi, pos] = find(block);
  Group& g = groups_[gi];
  // At most this group and the next on the device: anything else (left by an earlier forward that
  // ended without end_forward) goes first.
  for (size_t k = 0; k < groups_.size(); ++k)
    if (k != gi && k != gi + 1 && groups_[k].on_device) offload(groups_[k]);
  if (!g.on_device) onload(g);
  if (g.copied) {
    // GroupOffloadingHook.pre_forward's synchronisation, as an event: the compute stream waits for
    // this group's copies, the host does not.
    g.copied->block(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
    g.copied.reset();
  }
  // LazyPrefetchGroupOffloadingHook: the next group in execution order starts its copy now, to
  // overlap this group's compute.
  if (pos == 0 && gi + 1 < groups_.size() && !groups_[gi + 1].on_device) onload(groups_[gi + 1]);
  max_resident_ = std::max(max_resident_, resident_groups());
}

void BlockOffload::after(const torch::nn::Module& block) {
  const auto [gi, pos] = find(block);
  if (pos + 1 == groups_[gi].blocks.size() && groups_[gi].on_device) offload(groups_[gi]);
}

void BlockOffload::end_forward() {
  for (Group& g : groups_) {
    if (g.copied) {  // prefetched and never run: let its copy finish before the host copy may change
      g.copied->synchronize();
      g.copied.reset();
    }
    if (g.on_device) offload(g);
  }
}

int64_t BlockOffload::resident_groups() const {
  return static_cast<int64_t>(std::count_if(groups_.begin(), groups_.end(), [](const Group& g) { return g.on_device; }));
}

BlockOnDevice::BlockOnDevice(BlockOffload* offload, const torch::nn::Module& block) : offload_(offload), block_(block) {
  if (offload_) offload_->before(block_);
}

BlockOnDevice::~BlockOnDevice() {
  if (!offload_) return;
  try {
    offload_->after(block_);
  } catch (const std::exception& e) {
    log::debug("block offload: {}", e.what());
  }
}

OffloadedForward::~OffloadedForward() {
  if (!offload_) return;
  try {
    offload_->end_forward();
  } catch (const std::exception& e) {
    log::debug("block offload: {}", e.what());
  }
}

}  // namespace dpinfer::pipeline::nn

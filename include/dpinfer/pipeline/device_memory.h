#pragma once
// A device's memory as --max-device-memory sees it (issue 26 item 6): how much is free, a cap on what
// the run may allocate, and the peak it allocated.
//
// On a CUDA device these are the caching allocator's own: cudaMemGetInfo, setMemoryFraction (the cap
// torch.cuda.set_per_process_memory_fraction sets, after which an allocation over it raises
// OutOfMemoryError) and its allocated-bytes statistics. On the CPU the device is the host memory, so the
// same three come from a counting allocator put in front of LibTorch's CPU allocator (c10::SetCPUAllocator):
// it counts the bytes of every CPU tensor allocated (weights loaded into their own storage, activations,
// encodings), refuses an allocation that would take the count over the cap with c10::OutOfMemoryError, as
// the CUDA allocator does, and keeps the peak. It does not see memory LibTorch takes elsewhere (a weight
// that is a view of a memory-mapped file, thread stacks, the code): that is the runtime overhead the plan
// adds on the CPU (memory_plan.h).

#include <cstdint>
#include <optional>
#include <string>

namespace dpinfer::pipeline {

struct DeviceMemory {
  /// The bytes free on `device` now ("cuda:N": cudaMemGetInfo's free; "cpu": MemAvailable from
  /// /proc/meminfo). Unset when it cannot be read.
  static std::optional<int64_t> free_bytes(const std::string& device);
  /// Caps what the run may allocate on `device` at `bytes` (see above). Once per process.
  static void cap(const std::string& device, int64_t bytes);
  /// Starts counting (on the CPU, installs the counting allocator; on CUDA, resets the peak statistics).
  /// cap() starts it too.
  static void start_counting(const std::string& device);
  /// The most bytes allocated at once on `device` since start_counting() or cap(); 0 when not counting.
  static int64_t peak_bytes(const std::string& device);
  /// Whether start_counting() or cap() ran for `device`'s kind in this process.
  static bool counting(const std::string& device);
  /// Starts a new peak at the bytes allocated now (ComponentResidency measures each phase's peak so).
  static void reset_peak(const std::string& device);
  /// While one lives, this thread's CPU allocations are left out of the count and the cap: for tensors
  /// that are allocated but never written (a module built on the host only to be reallocated where its
  /// weights go), which take no resident memory.
  struct Uncounted {
    Uncounted();
    ~Uncounted();
    Uncounted(const Uncounted&) = delete;
    Uncounted& operator=(const Uncounted&) = delete;
  };
  /// The bytes allocated on `device` now; 0 when not counting.
  static int64_t allocated_bytes(const std::string& device);
};

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/device_memory.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#ifdef DPINFER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

/// LibTorch's CPU allocator with a count in front (device_memory.h). Each block carries its size in a
/// header of one alignment unit before the data, so that the data pointer is its own context and
/// raw_allocate()/raw_deleter() work as with c10's DefaultCPUAllocator (some kernels use them).
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kHeader = c10::gAlignment;  // keeps the data aligned as alloc_cpu's
  static constexpr size_t kUncountedBit = size_t{1} << 63;  // in the header's size: allocated under Uncounted
  static thread_local int uncounted_depth;

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::kCPU)};
    if (uncounted_depth > 0) {
      // Marked in the header, so that release() leaves the count alone too.
      char* block = static_cast<char*>(c10::alloc_cpu(n + kHeader));
      const size_t marked = n | kUncountedBit;
      std::memcpy(block, &marked, sizeof marked);
      void* data = block + kHeader;
      return {data, data, &release, c10::Device(c10::kCPU)};
    }
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t now = allocated_.fetch_add(bytes) + bytes;
    const int64_t cap = cap_.load();
    if (cap > 0 && now > cap) {
      allocated_.fetch_sub(bytes);
      C10_THROW_ERROR(OutOfMemoryError, "CPU out of memory: allocating " + std::to_string(n) + " bytes would take the run to " +
                                            std::to_string(now) + " bytes, over --max-device-memory's " +
                                            std::to_string(cap));
    }
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    char* block = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    std::memcpy(block, &n, sizeof n);
    void* data = block + kHeader;
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  static void release(void* data) {
    if (!data) return;
    char* block = static_cast<char*>(data) - kHeader;
    size_t n = 0;
    std::memcpy(&n, block, sizeof n);
    if (!(n & kUncountedBit)) instance().allocated_.fetch_sub(static_cast<int64_t>(n));
    c10::free_cpu(block);
  }

  /// The one instance, installed once and never destroyed (blocks it made may outlive any scope).
  static CountingCpuAllocator& instance() {
    static CountingCpuAllocator* counting = [] {
      auto* a = new CountingCpuAllocator();
      // Priority above the default CPU allocator's 0, so that LibTorch's own registration cannot replace it.
      c10::SetCPUAllocator(a, /*priority=*/10);
      return a;
    }();
    return *counting;
  }

  void set_cap(int64_t bytes) { cap_.store(bytes); }
  void reset_peak() { peak_.store(allocated_.load()); }
  int64_t allocated() const { return allocated_.load(); }
  int64_t peak() const { return peak_.load(); }

 private:
  CountingCpuAllocator() = default;
  std::atomic<int64_t> allocated_{0}, peak_{0}, cap_{0};
};

thread_local int CountingCpuAllocator::uncounted_depth = 0;

std::atomic<bool> counting_cpu{false}, counting_cuda{false};

/// MemAvailable from /proc/meminfo, in bytes.
std::optional<int64_t> host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

#ifdef DPINFER_WITH_CUDA
c10::DeviceIndex cuda_index(const std::string& device) {
  return static_cast<c10::DeviceIndex>(std::stoi(device.substr(5)));  // "cuda:N"
}
#endif

bool is_cpu(const std::string& device) { return device == "cpu"; }

}  // namespace

std::optional<int64_t> DeviceMemory::free_bytes(const std::string& device) {
  if (is_cpu(device)) return host_available_bytes();
#ifdef DPINFER_WITH_CUDA
  c10::cuda::CUDAGuard guard(cuda_index(device));
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
  return static_cast<int64_t>(free);
#else
  return std::nullopt;
#endif
}

void DeviceMemory::start_counting(const std::string& device) {
  if (is_cpu(device)) {
    CountingCpuAllocator::instance();
    counting_cpu = true;
    return;
  }
#ifdef DPINFER_WITH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index(device));
  counting_cuda = true;
#endif
}

DeviceMemory::Uncounted::Uncounted() { ++CountingCpuAllocator::uncounted_depth; }
DeviceMemory::Uncounted::~Uncounted() { --CountingCpuAllocator::uncounted_depth; }

bool DeviceMemory::counting(const std::string& device) { return is_cpu(device) ? counting_cpu.load() : counting_cuda.load(); }

void DeviceMemory::reset_peak(const std::string& device) {
  if (!counting(device)) return;
  if (is_cpu(device)) {
    CountingCpuAllocator::instance().reset_peak();
    return;
  }
#ifdef DPINFER_WITH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index(device));
#endif
}

void DeviceMemory::cap(const std::string& device, int64_t bytes) {
  start_counting(device);
  if (is_cpu(device)) {
    CountingCpuAllocator::instance().set_cap(bytes);
    return;
  }
#ifdef DPINFER_WITH_CUDA
  const c10::DeviceIndex index = cuda_index(device);
  c10::cuda::CUDAGuard guard(index);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess || total == 0)
    throw Error("--max-device-memory: cannot read " + device + "'s memory size");
  // torch.cuda.set_per_process_memory_fraction: a fraction of the device's total memory.
  c10::cuda::CUDACachingAllocator::setMemoryFraction(
      std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total)), index);
#else
  throw Error("--max-device-memory on " + device + ": this build of dpinfer has no CUDA");
#endif
}

int64_t DeviceMemory::peak_bytes(const std::string& device) {
  if (is_cpu(device)) return counting_cpu ? CountingCpuAllocator::instance().peak() : 0;
#ifdef DPINFER_WITH_CUDA
  using c10::CachingAllocator::StatType;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
  return stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak;
#else
  return 0;
#endif
}

int64_t DeviceMemory::allocated_bytes(const std::string& device) {
  if (is_cpu(device)) return counting_cpu ? CountingCpuAllocator::instance().allocated() : 0;
#ifdef DPINFER_WITH_CUDA
  using c10::CachingAllocator::StatType;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
  return stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
#else
  return 0;
#endif
}

}  // namespace dpinfer::pipeline

#pragma once
// --cuda-graphs (issue 28, the GPU levers): a denoiser call captured once into a CUDA graph and then
// replayed, as torch.cuda.CUDAGraph / torch.cuda.graph do it (warm-up on a side stream, capture on it,
// static input tensors that each call copies into, the graph's output read after each replay). A replay
// launches the captured kernels in one go, so the CPU's per-kernel launch cost (tens of microseconds a kernel,
// thousands of kernels a DiT call) leaves the step: it matters for small images and batches, where the GPU
// waits for the CPU. The kernels are the same, so are the values: a replay gives the eager call's bits.
//
// One graph per key: the call's context (which call of the step, the LoRA set), and each input's sizes and
// dtype. A new latent size or batch captures a new graph; a key seen before replays its graph. Moving the
// denoiser's weights (two-phase chunks, which take it off the device while the encoders run) gives them new
// addresses, which the graphs hold: the caller passes the first weight's address, and a new one drops every
// graph.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace dpinfer::pipeline::nn {

/// The key of a call: `context`, then each input's dtype and sizes ("-" for an undefined one).
std::string graph_key(const std::vector<at::Tensor>& inputs, const std::string& context);

/// Refuses (InputError, one line) --cuda-graphs on a device that has none: the CPU, or a LibTorch without CUDA.
void check_cuda_graphs(const std::string& device);

class DenoiserGraphs {
 public:
  using Call = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;
  DenoiserGraphs();
  ~DenoiserGraphs();
  DenoiserGraphs(const DenoiserGraphs&) = delete;
  DenoiserGraphs& operator=(const DenoiserGraphs&) = delete;

  /// call(inputs), from the graph of graph_key(inputs, context): captured on first use (after two eager
  /// warm-up calls on a side stream, whose results are dropped), replayed after that. `weights` is the
  /// address of the denoiser's first weight now; another than the last one drops every graph first. Returns
  /// a copy of the graph's output (the next replay overwrites it). Every input must be on the CUDA device;
  /// `call` must make no host synchronisation and no host-to-device copy (a capture refuses both).
  at::Tensor run(const std::vector<at::Tensor>& inputs, const std::string& context, const void* weights,
                 const Call& call);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }

 private:
  struct Graph;
  std::map<std::string, std::unique_ptr<Graph>> graphs_;
  const void* weights_ = nullptr;
  int64_t captures_ = 0, replays_ = 0;
};

}  // namespace dpinfer::pipeline::nn

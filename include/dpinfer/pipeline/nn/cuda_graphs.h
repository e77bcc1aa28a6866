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
// addresses, which the graphs hold, and so does a LoRA set kept unfused (on fp8 or GGUF weights: loading/lora.h
// attaches its factors again, as new tensors, whenever the set comes back): the caller passes a fingerprint of
// those addresses (denoiser_weights), and a new one drops every graph.
//
// A family's denoising loop uses the free functions below (every family's; the UNet families' in denoising.cpp's
// denoise()): per batch check_no_step_cache() and denoiser_weights(), per call run_denoiser() with one `call` for
// both ways, and count_graphs_into() for its statistics. A capture records kernels, not host code: whatever the call reads on
// the host (token grids, caption lengths, skipped layers) must be in the context, and nothing in it may copy host
// data to the device or read a device value on the host.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

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
  /// warm-up calls on a side stream, whose results are dropped), replayed after that. `weights` is
  /// denoiser_weights() now; another than the last one drops every graph first. Returns
  /// a copy of the graph's output (the next replay overwrites it). Every input must be on the CUDA device;
  /// `call` must make no host synchronisation and no host-to-device copy (a capture refuses both).
  at::Tensor run(const std::vector<at::Tensor>& inputs, const std::string& context, uint64_t weights,
                 const Call& call);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }

 private:
  struct Graph;
  std::map<std::string, std::unique_ptr<Graph>> graphs_;
  uint64_t weights_ = 0;
  int64_t captures_ = 0, replays_ = 0;
};

/// call(inputs) eagerly when `graphs` is null (no --cuda-graphs), else graphs->run(inputs, context, weights, call).
/// The same `call` serves both ways: under graphs a batch has no step cache (check_no_step_cache), so the
/// caches it passes are null.
at::Tensor run_denoiser(DenoiserGraphs* graphs, const std::vector<at::Tensor>& inputs, const std::string& context,
                        uint64_t weights, const DenoiserGraphs::Call& call);

/// Refuses (InputError, one line) a batch that runs a step cache (`settings`: the DiTs' first_block_cache or
/// dbcache, the UNets' deep_cache_interval) under --cuda-graphs (`graphs` set): a cache decides on the host which
/// blocks run, and a graph replays the ones it captured.
void check_no_step_cache(const DenoiserGraphs* graphs, bool step_cache,
                         const std::string& settings = "first_block_cache or dbcache");

/// Where `denoiser`'s weights are now (DenoiserGraphs::run's `weights`), or 0 without graphs: a hash of its first
/// weight's address and of every unfused LoRA factor's (nn/layers.h WeightedLayer::loras). Taken once per batch:
/// two-phase chunks may have brought the denoiser back elsewhere since the last one, and a LoRA set may have been
/// attached again.
uint64_t denoiser_weights(const DenoiserGraphs* graphs, const torch::nn::Module& denoiser);
/// denoiser_weights()'s hash, with or without graphs.
uint64_t weights_fingerprint(const torch::nn::Module& denoiser);

/// Sets a pipeline's statistics cuda_graph_captures and cuda_graph_replays (the run's so far); nothing without graphs.
void count_graphs_into(const DenoiserGraphs* graphs, nlohmann::json& statistics);

}  // namespace dpinfer::pipeline::nn

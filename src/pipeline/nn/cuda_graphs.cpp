#include "dpinfer/pipeline/nn/cuda_graphs.h"

#ifdef DPINFER_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {
namespace {

[[maybe_unused]] constexpr const char* kWithoutCuda =
    "--cuda-graphs: this dpinfer was built with a LibTorch without CUDA; drop --cuda-graphs";

}  // namespace

std::string graph_key(const std::vector<at::Tensor>& inputs, const std::string& context) {
  std::string key = context;
  for (const at::Tensor& t : inputs) {
    key += '|';
    if (!t.defined()) {
      key += '-';
      continue;
    }
    key += c10::toString(t.scalar_type());
    for (int64_t s : t.sizes()) key += ' ' + std::to_string(s);
  }
  return key;
}

void check_cuda_graphs(const std::string& device) {
  if (device.rfind("cuda", 0) != 0)
    throw InputError("--cuda-graphs: CUDA graphs replay GPU kernels, and the run is on " + device +
                     "; drop --cuda-graphs, or run on a CUDA device");
#ifndef DPINFER_WITH_CUDA
  throw InputError(kWithoutCuda);
#endif
}

#ifdef DPINFER_WITH_CUDA

struct DenoiserGraphs::Graph {
  at::cuda::CUDAGraph graph;
  std::vector<at::Tensor> inputs;  ///< the static inputs the graph reads: each call copies into them
  at::Tensor output;               ///< what the graph writes
};

DenoiserGraphs::DenoiserGraphs() = default;
DenoiserGraphs::~DenoiserGraphs() = default;

at::Tensor DenoiserGraphs::run(const std::vector<at::Tensor>& inputs, const std::string& context, uint64_t weights,
                               const Call& call) {
  if (weights != weights_) {
    graphs_.clear();  // the graphs read the weights' old addresses
    weights_ = weights;
  }
  const std::string key = graph_key(inputs, context);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    auto g = std::make_unique<Graph>();
    // Contiguous copies: an expanded input (a timestep or guidance broadcast over the batch) cannot be copied into.
    for (const at::Tensor& t : inputs) g->inputs.push_back(t.defined() ? t.contiguous().clone() : at::Tensor());
    // Ref: torch/cuda/graphs.py graph.__enter__ and the "whole network capture" recipe of PyTorch's CUDA
    // semantics notes: warm up on a side stream (lazy initialisations, cuBLAS workspaces), then capture there.
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    current.synchronize();
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      for (int warm = 0; warm < 2; ++warm) call(g->inputs);
      side.synchronize();
      g->graph.capture_begin();
      g->output = call(g->inputs);
      g->graph.capture_end();
    }
    side.synchronize();
    ++captures_;
    it = graphs_.emplace(key, std::move(g)).first;
  } else {
    Graph& g = *it->second;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) g.inputs[i].copy_(inputs[i]);
  }
  // The capture itself computed nothing; its first replay does (with the inputs it was captured from).
  it->second->graph.replay();
  ++replays_;
  return it->second->output.clone();
}

#else

struct DenoiserGraphs::Graph {};

DenoiserGraphs::DenoiserGraphs() { throw InputError(kWithoutCuda); }
DenoiserGraphs::~DenoiserGraphs() = default;
at::Tensor DenoiserGraphs::run(const std::vector<at::Tensor>&, const std::string&, uint64_t, const Call&) {
  throw Error("DenoiserGraphs::run without CUDA");
}

#endif

at::Tensor run_denoiser(DenoiserGraphs* graphs, const std::vector<at::Tensor>& inputs, const std::string& context,
                        uint64_t weights, const DenoiserGraphs::Call& call) {
  return graphs ? graphs->run(inputs, context, weights, call) : call(inputs);
}

void check_no_step_cache(const DenoiserGraphs* graphs, bool step_cache, const std::string& settings) {
  if (graphs && step_cache)
    throw InputError("--cuda-graphs with a step cache (" + settings + "): a cache decides on the host, per step, "
                     "which blocks run, and a graph replays the ones it captured; drop one");
}

uint64_t denoiser_weights(const DenoiserGraphs* graphs, const torch::nn::Module& denoiser) {
  return graphs ? weights_fingerprint(denoiser) : 0;
}

uint64_t weights_fingerprint(const torch::nn::Module& denoiser) {
  uint64_t hash = 0;
  const auto mix = [&hash](const void* address) {  // boost::hash_combine's step, on 64 bits
    hash ^= static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address)) + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  };
  mix(denoiser.parameters().front().data_ptr());
  for (const std::shared_ptr<torch::nn::Module>& module : denoiser.modules(/*include_self=*/false))
    if (const auto* layer = dynamic_cast<const WeightedLayer*>(module.get()))
      for (const WeightedLayer::LoraAdapter& adapter : layer->loras()) {
        mix(adapter.down.data_ptr());
        mix(adapter.up.data_ptr());
      }
  return hash;
}

void count_graphs_into(const DenoiserGraphs* graphs, nlohmann::json& statistics) {
  if (!graphs) return;
  statistics["cuda_graph_captures"] = graphs->captures();
  statistics["cuda_graph_replays"] = graphs->replays();
}

}  // namespace dpinfer::pipeline::nn

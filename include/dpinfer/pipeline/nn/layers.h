#pragma once
// The leaf layers every model is built from: LibTorch's Linear, Conv2d, GroupNorm,
// LayerNorm and Embedding, and transformers' RMSNorm, with the same parameter names
// and the same forward, but allocated uninitialised (at::empty) with the caller's
// TensorOptions: in the run dtype, on the target device, or on the meta device to
// learn names and shapes without memory. The weights always come from a checkpoint, so LibTorch's random
// initialisation (in fp32 on the CPU, then a cast and a move) would only cost time
// and host memory: a 12B transformer would need 48 GB of it per rank.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace dpinfer::io {
enum class GgmlType : uint32_t;  // io/gguf_file.h
}  // namespace dpinfer::io

namespace dpinfer::pipeline::nn {

/// What Linear and Conv2d share: their weight and bias, and how they are kept between uses.
/// By default in the dtype they compute in. Stored (store_as()): in a narrower dtype, float8,
/// and cast back to the compute dtype for each forward, as diffusers' layerwise casting hook
/// does (hooks/layerwise_casting.py: module.to(compute_dtype) before the forward, back to the
/// storage dtype after), so the layer computes with exactly the values that hook gives it.
class WeightedLayer : public torch::nn::Module {
 public:
  /// Keeps weight and bias in `storage` from now on, computing in `compute`. Their values
  /// are not converted: the new tensors are allocated uninitialised, in `storage` on the
  /// weight's device, for load_weights() to fill (layerwise_storage.h).
  void store_as(at::ScalarType storage, at::ScalarType compute);
  /// Keeps the weight as GGUF blocks of `type` from now on, computing in `compute`: a uint8 tensor
  /// [rows, row bytes] (the last dimension counted in bytes, as diffusers' GGUFParameter holds it)
  /// allocated uninitialised on the weight's device for load_weights() to fill with the file's
  /// bytes, dequantized for each forward as diffusers' GGUFLinear.forward_native does. The bias,
  /// when there is one, stays in the run dtype (diffusers loads a GGUF file's F32 biases so).
  void store_gguf(io::GgmlType type, at::ScalarType compute);
  /// Whether store_as() or store_gguf() was called.
  bool stored() const { return compute_dtype_ != at::ScalarType::Undefined; }
  /// The GGUF type of the weight's blocks, when store_gguf() was called.
  std::optional<io::GgmlType> gguf_type() const { return gguf_type_; }
  /// The dtype the forward computes in: the run dtype, whatever the storage.
  at::ScalarType compute_dtype() const { return stored() ? compute_dtype_ : weight.scalar_type(); }

  /// One LoRA adapter kept unfused beside the layer's weight, as PEFT's lora.Linear / lora.Conv2d keeps it
  /// (peft 0.17 tuners/lora/layer.py): used where the weight is stored (float8 or GGUF blocks), which a merge
  /// cannot change without leaving diffusers' computation (loading/lora.h).
  struct LoraAdapter {
    at::Tensor down;  ///< lora_A's weight: [r, in] for a Linear, [r, in, kh, kw] for a Conv2d (its stride and padding)
    at::Tensor up;    ///< lora_B's weight: [out, r], or [out, r, 1, 1]
    /// PEFT's scaling: a Python float (scale * lora_alpha / r), multiplied as a wrapped number
    double scaling = 1;
    /// or, where lora_alpha is a tensor (a FLUX.1 file's network alphas), that 0-d float32 CPU tensor; else undefined
    at::Tensor scaling_tensor;
  };
  /// Adds `adapter` after those already attached: the forward adds each one's output in turn.
  void add_lora(LoraAdapter adapter) { loras_.push_back(std::move(adapter)); }
  /// Detaches every adapter: the layer computes with its weight alone again.
  void clear_loras() { loras_.clear(); }
  const std::vector<LoraAdapter>& loras() const { return loras_; }

  at::Tensor weight, bias;

 protected:
  /// For a layer that keeps its weight otherwise than store_as() and store_gguf() do (LinearImpl::compute_in_fp8):
  /// the dtype its forward computes in and its LoRA adapters take.
  void set_compute_dtype(at::ScalarType compute) { compute_dtype_ = compute; }
  /// weight and bias in the compute dtype, for one forward.
  std::pair<at::Tensor, at::Tensor> for_compute() const;
  /// `result` (the base layer's output for `x`) plus each attached adapter's, as PEFT's lora.Linear.forward and
  /// _ConvNd.forward add them: x cast to the adapter's dtype (_cast_input_dtype), `result = result +
  /// lora_B(lora_A(x)) * scaling` adapter after adapter (promoting to the wider dtype), then cast back to the
  /// base output's dtype. `apply(x, adapter)` is lora_B(lora_A(x)) for the layer's kind.
  template <typename Apply>
  at::Tensor with_loras(const at::Tensor& x, at::Tensor result, const Apply& apply) const {
    if (loras_.empty()) return result;
    const at::ScalarType result_dtype = result.scalar_type();
    at::Tensor input = x;
    for (const LoraAdapter& a : loras_) {
      if (input.scalar_type() != a.down.scalar_type()) input = input.to(a.down.scalar_type());
      const at::Tensor h = apply(input, a);
      result = result + (a.scaling_tensor.defined() ? h * a.scaling_tensor : h * a.scaling);
    }
    return result.to(result_dtype);
  }

 private:
  at::ScalarType compute_dtype_ = at::ScalarType::Undefined;
  std::optional<io::GgmlType> gguf_type_;
  std::vector<LoraAdapter> loras_;
};

/// torch.nn.Linear: y = x W^T + b. weight [out, in], bias [out].
class LinearImpl : public WeightedLayer {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias, const at::TensorOptions& options);
  /// [..., in] to [..., out], computed as torch.nn.functional.linear computes it for diffusers'
  /// and transformers' modules, whose weights are Parameters that require grad even under no_grad
  /// (see layers.cpp).
  at::Tensor forward(const at::Tensor& x) const;

  /// --fp8-compute (issue 28): from now on the layer multiplies in float8_e4m3fn with torch._scaled_mm, as a
  /// Linear that torchao 0.15's quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()
  /// or PerRow())) replaced computes (quantization/quantize_/workflows/float8/float8_tensor.py _float8_addmm_impl,
  /// kernel "torch"): its loaded weight is quantized once, here, with a scale per tensor (`rowwise` false, [1, 1])
  /// or per output row ([out, 1]), and each input for each call with a scale per tensor or per row (token); the
  /// bias stays in the run dtype. The weight tensor becomes the float8 values (half of bf16's memory), the scales
  /// a float32 buffer "fp8_weight_scale" (so that a module move takes it along).
  /// Per tensor, an input's scale spans one image, not the batch: the first dimension (a DiT's batch) is cut
  /// into single images, each with its own scale, so that an image does not depend on its batch-mates (torchao
  /// scales the whole call; the two agree for a call of one image).
  void compute_in_fp8(bool rowwise);
  bool computes_in_fp8() const { return fp8_weight_scale_.defined(); }

 private:
  at::Tensor fp8_forward(const at::Tensor& x) const;
  at::Tensor fp8_weight_scale_;
  bool fp8_rowwise_ = false;
};
TORCH_MODULE(Linear);

/// torch.nn.Conv2d (groups 1, dilation 1, zero padding). weight [out, in, k, k], bias [out].
class Conv2dImpl : public WeightedLayer {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias,
             const at::TensorOptions& options);
  /// [B, in, H, W] to [B, out, H', W'].
  at::Tensor forward(const at::Tensor& x) const;

 private:
  int64_t stride_, padding_;
};
TORCH_MODULE(Conv2d);

/// torch.nn.GroupNorm with affine weight and bias [channels].
class GroupNormImpl : public torch::nn::Module {
 public:
  GroupNormImpl(int64_t groups, int64_t channels, double eps, const at::TensorOptions& options);
  /// [B, C, ...] normalised over each group of C / groups channels.
  at::Tensor forward(const at::Tensor& x) const { return at::group_norm(x, groups_, weight, bias, eps_); }

  at::Tensor weight, bias;

 private:
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(GroupNorm);

/// torch.nn.LayerNorm over the last dimension, with weight and bias [dim] when `affine`.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, bool affine, const at::TensorOptions& options);
  /// [..., dim] to [..., dim].
  at::Tensor forward(const at::Tensor& x) const { return at::layer_norm(x, {dim_}, weight, bias, eps_); }

  at::Tensor weight, bias;

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

/// torch.nn.Embedding: weight [num_embeddings, dim].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, const at::TensorOptions& options);
  /// Integer ids [...] to [..., dim].
  at::Tensor forward(const at::Tensor& ids) const { return at::embedding(weight, ids); }

  at::Tensor weight;
};
TORCH_MODULE(Embedding);

/// transformers' LlamaRMSNorm, which Qwen2RMSNorm, Qwen2_5_VL's and Qwen3RMSNorm copy: x over
/// the last dimension, normalised in fp32 (x * rsqrt(mean(x^2) + eps)), cast back to x's dtype,
/// then times weight [dim] in that dtype. diffusers' RMSNorm rounds differently (it casts to
/// the weight's dtype), so the two are not interchangeable in half precision.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t dim, double eps, const at::TensorOptions& options);
  /// [..., dim] to [..., dim], in x's dtype.
  at::Tensor forward(const at::Tensor& x) const;

  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(LlamaRMSNorm);

/// The options a module is built with when a caller gives none: float32 on the CPU.
inline at::TensorOptions default_options() { return at::TensorOptions().dtype(at::kFloat); }

/// --channels-last: every 4-D floating-point parameter and buffer of `module` (Conv2d kernels
/// [out, in, k, k]) rewritten in channels-last memory format, in place (set_data: each handle follows),
/// as torch.nn.Module.to(memory_format=torch.channels_last) converts the 4-D tensors it applies to.
/// The values are the same; the convolutions then pick channels-last kernels and give channels-last
/// activations (ATen's conv suggest_memory_format follows the weight). GGUF blocks (bytes) stay as they are.
void to_channels_last(torch::nn::Module& module);

}  // namespace dpinfer::pipeline::nn

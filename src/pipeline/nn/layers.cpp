#include "dpinfer/pipeline/nn/layers.h"

#include <vector>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/pipeline/nn/gguf_dequant.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {

void WeightedLayer::store_as(at::ScalarType storage, at::ScalarType compute) {
  // set_data keeps the registered parameter and this member one tensor.
  weight.set_data(at::empty(weight.sizes(), weight.options().dtype(storage)));
  if (bias.defined()) bias.set_data(at::empty(bias.sizes(), bias.options().dtype(storage)));
  compute_dtype_ = compute;
}

void WeightedLayer::store_gguf(io::GgmlType type, at::ScalarType compute) {
  const int64_t block = io::ggml_block_size(type), size = io::ggml_type_size(type);
  std::vector<int64_t> shape(weight.sizes().begin(), weight.sizes().end());
  if (shape.empty() || shape.back() % block != 0)
    throw InputError("a weight of shape [" + std::to_string(shape.empty() ? 0 : shape.back()) + "] cannot hold " +
                     std::string(io::ggml_type_name(type)) + " blocks of " + std::to_string(block) + " values");
  shape.back() = shape.back() / block * size;
  weight.set_data(at::empty(shape, weight.options().dtype(at::kByte)));
  compute_dtype_ = compute;
  gguf_type_ = type;
}

std::pair<at::Tensor, at::Tensor> WeightedLayer::for_compute() const {
  if (!stored()) return {weight, bias};
  // Ref: diffusers 0.36 quantizers/gguf/utils.py GGUFLinear.forward_native: dequantize_gguf_tensor,
  // then .to(compute_dtype), the bias .to(compute_dtype).
  if (gguf_type_)
    return {dequantize_gguf(weight, *gguf_type_).to(compute_dtype_), bias.defined() ? bias.to(compute_dtype_) : bias};
  // The hook casts every parameter of the module, the bias too.
  return {weight.to(compute_dtype_), bias.defined() ? bias.to(compute_dtype_) : bias};
}

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options), /*requires_grad=*/false);
  if (with_bias) bias = register_parameter("bias", at::empty({out_features}, options), false);
}

// Ref: aten/src/ATen/native/Linear.cpp linear and LinearAlgebra.cpp _matmul_impl / should_fold.
// A contiguous input, or a 2-D one, takes at::linear's fused path (addmm), whatever the weight.
// A non-contiguous input of 3 or more dims goes through matmul(x, weight.t()), then add_(bias);
// and matmul folds x into a matrix (x.reshape(-1, in).mm(weight.t()), a copy) when the weight
// requires grad, as diffusers' and transformers' Parameters do even under torch.no_grad, but
// runs a bmm over x's batch when it does not (dpinfer's weights, in InferenceMode) and x's batch
// dims cannot be merged without a copy. The two sum in another order: in fp16 one value in a few
// hundred differs by an ulp (tiny-sdxl-alt's linear proj_in on Transformer2DModel's permuted
// [B, H W, C] view, issue 35: 96.98% of an fp16 image identical before, 100% after). So the fold,
// as diffusers computes it.
// A GGUF layer's weight is the dequantized tensor GGUFLinear passes to F.linear, which requires no
// grad: at::linear as it is, no fold.
namespace {

/// torch.nn.functional.linear(x, w, b) for a weight `w` that is a Parameter requiring grad (see above).
at::Tensor layers_linear_of_parameter(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (x.dim() < 3 || x.is_contiguous()) return at::linear(x, w, b);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  at::Tensor out = at::mm(x.reshape({-1, x.size(-1)}), w.t()).view(shape);  // [..., out]
  if (b.defined()) out.add_(b);
  return out;
}

/// torch.finfo(torch.float8_e4m3fn).max.
constexpr double kFloat8E4m3Max = 448.0;

/// `t` [..., n] in float8_e4m3fn and its float32 scale, as torchao 0.15 quantizes a tensor (quant_primitives.py
/// _choose_scale_float8, then _quantize_affine_float8): the scale is amax(|t|) over the whole tensor (0-d) or over
/// its last dimension ([..., 1]) divided by 448 in t's own dtype (so a bf16 tensor's scale is rounded to bf16),
/// then cast to float32; the values are t in float32 divided by the scale, clamped to ±448 and cast.
std::pair<at::Tensor, at::Tensor> quantize_float8(const at::Tensor& t, bool rowwise) {
  const at::Tensor amax = rowwise ? t.abs().amax({-1}, /*keepdim=*/true) : t.abs().amax();
  const at::Tensor scale = (amax / kFloat8E4m3Max).to(at::kFloat);
  at::Tensor values = (t.to(at::kFloat) / scale).clamp(-kFloat8E4m3Max, kFloat8E4m3Max).to(at::kFloat8_e4m3fn);
  return {std::move(values), scale};
}

}  // namespace

void LinearImpl::compute_in_fp8(bool rowwise) {
  if (stored() || computes_in_fp8())
    throw Error("a Linear whose weight is stored (float8 or GGUF blocks) cannot also compute in float8");
  const at::ScalarType compute = weight.scalar_type();
  auto [values, scale] = quantize_float8(weight, rowwise);  // [out, in], [out, 1] or 0-d
  weight.set_data(values);
  // torchao's per-tensor weight scale is [1, 1] (the block is the whole [out, in] weight).
  fp8_weight_scale_ = register_buffer("fp8_weight_scale", rowwise ? scale : scale.reshape({1, 1}));
  fp8_rowwise_ = rowwise;
  set_compute_dtype(compute);
}

// Ref: torchao 0.15 float8_tensor.py _float8_addmm_impl (kernel "torch") and float8/inference.py
// addmm_float8_unwrapped_inference: the input quantized in its own shape, its values as a row-major
// [rows, in] matrix (preprocess_data) and a per-row scale as [rows, 1] (preprocess_scale), the weight as
// its transpose [in, out] (column-major, as _scaled_mm wants it) with its scale transposed ([1, out] per
// row); torch._scaled_mm with torchao's default use_fast_accum=True and the bias, into the input's dtype,
// except that a float32 output adds the bias after (_scaled_mm takes none there).
at::Tensor LinearImpl::fp8_forward(const at::Tensor& x) const {
  const auto one = [this](const at::Tensor& part) {  // [..., in] -> [..., out]
    const int64_t in = part.size(-1);
    auto [values, scale] = quantize_float8(part, fp8_rowwise_);
    values = values.reshape({-1, in}).contiguous();
    scale = fp8_rowwise_ ? scale.reshape({-1, 1}) : scale.reshape({1, 1});
    const at::ScalarType out_dtype = part.scalar_type();
    const bool bias_after = bias.defined() && out_dtype == at::kFloat;
    at::Tensor out = at::_scaled_mm(values, weight.t(), scale, fp8_rowwise_ ? fp8_weight_scale_.t() : fp8_weight_scale_,
                                    bias.defined() && !bias_after ? std::optional<at::Tensor>(bias) : std::nullopt,
                                    std::nullopt, out_dtype, /*use_fast_accum=*/true);
    if (bias_after) out = out + bias;
    std::vector<int64_t> shape(part.sizes().begin(), part.sizes().end());
    shape.back() = weight.size(0);
    return out.reshape(shape);
  };
  // Per row the scales never span two images; per tensor, one scale per image (the first dimension).
  if (fp8_rowwise_ || x.dim() < 2 || x.size(0) == 1) return one(x);
  std::vector<at::Tensor> images;
  images.reserve(static_cast<size_t>(x.size(0)));
  for (int64_t i = 0; i < x.size(0); ++i) images.push_back(one(x.narrow(0, i, 1)));
  return at::cat(images, 0);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) const {
  at::Tensor out;
  if (computes_in_fp8()) {
    out = fp8_forward(x);
  } else {
    const auto [w, b] = for_compute();
    out = gguf_type() ? at::linear(x, w, b) : layers_linear_of_parameter(x, w, b);
  }
  // PEFT's lora_A and lora_B are nn.Linear layers without bias whose weights are Parameters that require grad
  // (inject_adapter_in_model makes them trainable): [..., in] -> [..., r] -> [..., out]. On a float8-computing
  // layer they run beside it in the run dtype, as PEFT's adapters on a torchao-quantized base layer do.
  return with_loras(x, std::move(out), [](const at::Tensor& in, const LoraAdapter& a) {
    return layers_linear_of_parameter(layers_linear_of_parameter(in, a.down, {}), a.up, {});
  });
}

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
                       bool with_bias, const at::TensorOptions& options)
    : stride_(stride), padding_(padding) {
  weight = register_parameter("weight", at::empty({out_channels, in_channels, kernel, kernel}, options), false);
  if (with_bias) bias = register_parameter("bias", at::empty({out_channels}, options), false);
}

at::Tensor Conv2dImpl::forward(const at::Tensor& x) const {
  const auto [w, b] = for_compute();
  at::Tensor out = at::conv2d(x, w, b, {stride_, stride_}, {padding_, padding_});
  // Ref: peft 0.17 tuners/lora/layer.py _ConvNd.update_layer: lora_A is a Conv2d(in, r) with the base layer's
  // kernel, stride and padding and no bias, lora_B a 1x1 Conv2d(r, out), stride 1: [B, in, H, W] -> [B, r, H', W']
  // -> [B, out, H', W'].
  return with_loras(x, std::move(out), [this](const at::Tensor& in, const LoraAdapter& a) {
    return at::conv2d(at::conv2d(in, a.down, {}, {stride_, stride_}, {padding_, padding_}), a.up);
  });
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps, const at::TensorOptions& options)
    : groups_(groups), eps_(eps) {
  weight = register_parameter("weight", at::empty({channels}, options), false);
  bias = register_parameter("bias", at::empty({channels}, options), false);
}

LayerNormImpl::LayerNormImpl(int64_t dim, double eps, bool affine, const at::TensorOptions& options)
    : dim_(dim), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", at::empty({dim}, options), false);
    bias = register_parameter("bias", at::empty({dim}, options), false);
  }
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({num_embeddings, dim}, options), false);
}

// Ref: transformers/models/qwen3/modeling_qwen3.py Qwen3RMSNorm (= Qwen2RMSNorm, LlamaRMSNorm)
LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t dim, double eps, const at::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::empty({dim}, options), false);
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) const {
  at::Tensor h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(x.scalar_type());
}

void to_channels_last(torch::nn::Module& module) {
  auto convert = [](at::Tensor& t) {
    if (t.defined() && t.dim() == 4 && at::isFloatingType(t.scalar_type()))
      t.set_data(t.contiguous(at::MemoryFormat::ChannelsLast));
  };
  for (at::Tensor& p : module.parameters()) convert(p);
  for (at::Tensor& b : module.buffers()) convert(b);
}

}  // namespace dpinfer::pipeline::nn

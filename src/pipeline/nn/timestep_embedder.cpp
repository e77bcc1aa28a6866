#include "dpinfer/pipeline/nn/timestep_embedder.h"

#include <memory>

#include "dpinfer/pipeline/nn/embeddings.h"

namespace dpinfer::pipeline::nn {

// Ref: diffusers/models/transformers/transformer_z_image.py TimestepEmbedder
DitTimestepEmbedderImpl::DitTimestepEmbedderImpl(int64_t out_size, int64_t mid_size, int64_t frequency_embedding_size,
                                                 const at::TensorOptions& options)
    : frequency_embedding_size_(frequency_embedding_size) {
  auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());  // nn.Sequential; mlp.1 is SiLU
  linear_0_ = mlp->register_module("0", Linear(frequency_embedding_size, mid_size, true, options));
  linear_2_ = mlp->register_module("2", Linear(mid_size, out_size, true, options));
}

at::Tensor DitTimestepEmbedderImpl::forward(const at::Tensor& t) {
  // timestep_embedding(t, F, max_period=10000): -ln(10000) * arange(F/2) / (F/2), exp, t * f,
  // cat(cos, sin): get_timestep_embedding's arithmetic with flip_sin_to_cos and shift 0.
  const at::Tensor features = timestep_embedding(t, frequency_embedding_size_, true, 0.0);  // [B, F] float32
  // The weight's dtype when it is a float (float8 too, under --weight-storage fp8), else the layer's
  // compute dtype (GGUF blocks, uint8): diffusers reads mlp[0].weight.dtype, then GGUFLinear.compute_dtype.
  const at::ScalarType weight_dtype = linear_0_->weight.scalar_type();
  const at::ScalarType dtype = at::isFloatingType(weight_dtype) ? weight_dtype : linear_0_->compute_dtype();
  return linear_2_(at::silu(linear_0_(features.to(dtype))));
}

}  // namespace dpinfer::pipeline::nn

#include "dpinfer/pipeline/nn/rope.h"

#include <string>
#include <utility>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {

AxialRope::AxialRope(double theta, std::vector<int64_t> axes_dims, std::vector<int64_t> axes_lens)
    : theta_(theta), axes_dims_(std::move(axes_dims)), axes_lens_(std::move(axes_lens)) {
  if (axes_dims_.size() != axes_lens_.size()) throw Error("rope: axes_dims and axes_lens differ in length");
  for (int64_t d : axes_dims_)
    if (d <= 0 || d % 2 != 0) throw Error("rope: every axes_dims entry must be even and positive");
}

at::Tensor AxialRope::operator()(const at::Tensor& ids) {
  if (cpu_tables_.empty()) {
    // Ref: transformer_z_image.py RopeEmbedder.precompute_freqs_cis: theta ** (arange(0, d, 2) / d)
    // and its reciprocal (Python's 1.0 / t is t.reciprocal() * 1.0) in float64, the outer product
    // with the positions in float64, then .float() and torch.polar in float32, on the CPU.
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    for (size_t a = 0; a < axes_dims_.size(); ++a) {
      const int64_t d = axes_dims_[a];
      at::Tensor freqs = at::pow(theta_, at::arange(0, d, 2, f64) / d).reciprocal() * 1.0;  // [d/2]
      at::Tensor angles = at::outer(at::arange(axes_lens_[a], f64), freqs).to(at::kFloat);  // [len, d/2]
      cpu_tables_.push_back(at::polar(at::ones_like(angles), angles));                      // complex64
    }
  }
  if (device_tables_.empty() || device_tables_[0].device() != ids.device()) {
    device_tables_.clear();
    for (const at::Tensor& t : cpu_tables_) device_tables_.push_back(t.to(ids.device()));
  }
  std::vector<at::Tensor> parts;
  for (size_t a = 0; a < device_tables_.size(); ++a)
    parts.push_back(device_tables_[a].index_select(0, ids.select(1, static_cast<int64_t>(a)).to(at::kLong)));
  return at::cat(parts, -1);  // [N, sum(axes_dims)/2]
}

at::Tensor apply_rotary_emb_complex(const at::Tensor& x, const at::Tensor& freqs) {
  std::vector<int64_t> pairs(x.sizes().begin(), x.sizes().end() - 1);
  pairs.push_back(-1);
  pairs.push_back(2);
  const at::Tensor xc = at::view_as_complex(x.to(at::kFloat).reshape(pairs));  // [B, N, h, d/2] complex64
  return at::view_as_real(xc * freqs.unsqueeze(2)).flatten(3).to(x.scalar_type());  // [B, N, h, d]
}

RotaryCosSin rotary_cos_sin(const at::Tensor& ids, double theta, const std::vector<int64_t>& axes_dims) {
  if (ids.dim() != 2 || ids.size(1) != static_cast<int64_t>(axes_dims.size()))
    throw Error("rope: ids must be [N, " + std::to_string(axes_dims.size()) + "], got " + c10::str(ids.sizes()));
  const at::Tensor pos = ids.to(at::kFloat);  // FluxPosEmbed: pos = ids.float()
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(ids.device());
  std::vector<at::Tensor> cos_parts, sin_parts;
  for (size_t a = 0; a < axes_dims.size(); ++a) {
    const int64_t d = axes_dims[a];
    if (d <= 0 || d % 2 != 0) throw Error("rope: every axes_dims entry must be even and positive");
    // 1.0 / (theta ** (arange(0, d, 2) / d)) / linear_factor (1.0); Python's 1.0 / t is
    // t.reciprocal() * 1.0, and / 1.0 changes no bit.
    const at::Tensor freqs = at::pow(theta, at::arange(0, d, 2, f64) / d).reciprocal() * 1.0;  // [d/2]
    const at::Tensor angles = at::outer(pos.select(1, static_cast<int64_t>(a)), freqs);       // [N, d/2] float64
    cos_parts.push_back(angles.cos().repeat_interleave(2, 1).to(at::kFloat));                 // [N, d]
    sin_parts.push_back(angles.sin().repeat_interleave(2, 1).to(at::kFloat));
  }
  return {at::cat(cos_parts, -1), at::cat(sin_parts, -1)};
}

at::Tensor apply_rotary_emb_real(const at::Tensor& x, const RotaryCosSin& freqs) {
  std::vector<int64_t> pairs(x.sizes().begin(), x.sizes().end() - 1);
  pairs.push_back(-1);
  pairs.push_back(2);
  const at::Tensor xp = x.reshape(pairs);                         // [B, N, h, d/2, 2]
  const at::Tensor real = xp.select(-1, 0), imag = xp.select(-1, 1);  // x_real, x_imag = unbind(-1)
  const at::Tensor rotated = at::stack({-imag, real}, -1).flatten(3);  // [B, N, h, d]
  const at::Tensor cos = freqs.cos.unsqueeze(1).to(x.device()), sin = freqs.sin.unsqueeze(1).to(x.device());  // [N, 1, d]
  return (x.to(at::kFloat) * cos + rotated.to(at::kFloat) * sin).to(x.scalar_type());
}

// Ref: transformers/models/qwen3/modeling_qwen3.py and qwen2_5_vl/modeling_qwen2_5_vl.py rotate_half.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

}  // namespace dpinfer::pipeline::nn

#pragma once
// Rotary position embedding over several position axes, rotating interleaved pairs (x[2i],
// x[2i+1]) of each head: as complex numbers, the RoPE of Z-Image (3 axes, theta 256), whose
// rotation serves Qwen-Image's MSRoPE (ms_rope.h) too; and as real cos and sin tables, the RoPE of
// Flux (FluxPosEmbed, 3 axes on the token ids, theta 10000), which rounds differently.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace dpinfer::pipeline::nn {

/// diffusers' Z-Image RopeEmbedder (models/transformers/transformer_z_image.py): one table of
/// unit complex numbers per axis a, cis(p * theta^(-2j/d_a)) for positions p < axes_lens[a] and
/// j < d_a/2, built as diffusers builds it (frequencies and angles in float64, the angles
/// rounded to float32, cos and sin in float32 on the CPU, complex64), then looked up per
/// position id and concatenated over the axes.
class AxialRope {
 public:
  /// Every axes_dims entry must be even and positive, axes_lens as long as axes_dims.
  AxialRope(double theta, std::vector<int64_t> axes_dims, std::vector<int64_t> axes_lens);

  /// Position ids [N, n_axes] (integer, each id[a] in [0, axes_lens[a])) to complex64
  /// [N, sum(axes_dims)/2] on the ids' device. The tables are built on the CPU on the first
  /// call and copied to each device once.
  at::Tensor operator()(const at::Tensor& ids);

  const std::vector<int64_t>& axes_dims() const { return axes_dims_; }
  const std::vector<int64_t>& axes_lens() const { return axes_lens_; }

 private:
  double theta_;
  std::vector<int64_t> axes_dims_, axes_lens_;
  std::vector<at::Tensor> cpu_tables_;     // [axes_lens[a], axes_dims[a]/2] complex64
  std::vector<at::Tensor> device_tables_;  // the same on the last device asked for
};

/// Rotates x [B, N, heads, d] by freqs complex64 [B, N, d/2] or [1, N, d/2] (broadcast over the
/// heads, and over the batch for a leading 1: Qwen-Image's MSRoPE, see ms_rope.h): each
/// pair (x[2i], x[2i+1]) as the complex x[2i] + i x[2i+1], multiplied in complex64, so in
/// float32 whatever x's dtype, and returned in x's dtype. Ref: the apply_rotary_emb of
/// diffusers' ZSingleStreamAttnProcessor.
at::Tensor apply_rotary_emb_complex(const at::Tensor& x, const at::Tensor& freqs);

/// transformers' rotate_half (Llama-style RoPE, the two halves of the last dimension as the pairs):
/// [x1, x2] -> [-x2, x1]. In x's dtype; Qwen3's and Qwen2.5-VL's text and vision attention use it.
at::Tensor rotate_half(const at::Tensor& x);

/// Real RoPE tables over a sequence: cos and sin, float32 [N, sum(axes_dims)], each angle's value
/// repeated for the two members of its pair.
struct RotaryCosSin {
  at::Tensor cos, sin;
};

/// diffusers' FluxPosEmbed (models/transformers/transformer_flux.py) with get_1d_rotary_pos_embed
/// (models/embeddings.py; use_real, repeat_interleave_real, freqs_dtype float64): for axis a with
/// width d_a, the frequencies 1 / theta^(2j/d_a) in float64, the angles ids[:, a] (as float32,
/// widened) times them in float64, cos and sin in float64, each repeated twice along the row,
/// then rounded to float32; the axes concatenated. ids [N, axes_dims.size()] (any real dtype) on
/// any device; the tables are computed on the ids' device, as diffusers computes them.
RotaryCosSin rotary_cos_sin(const at::Tensor& ids, double theta, const std::vector<int64_t>& axes_dims);

/// diffusers' apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1, sequence_dim=1)
/// (models/embeddings.py): x [B, N, heads, d], rotated = (-x[2i+1], x[2i]) per pair, out =
/// x * cos + rotated * sin in float32 (cos, sin [N, d] broadcast over the batch and the heads),
/// returned in x's dtype.
at::Tensor apply_rotary_emb_real(const at::Tensor& x, const RotaryCosSin& freqs);

}  // namespace dpinfer::pipeline::nn

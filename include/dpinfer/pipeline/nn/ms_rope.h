#pragma once
// Qwen-Image's MSRoPE (Multimodal Scalable RoPE): rotary tables over three position axes (frame,
// height, width) with the image grid centred on the origin and the text placed on the diagonal
// after it. Applied with nn::apply_rotary_emb_complex (rope.h), like the Z-Image RoPE.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace dpinfer::pipeline::nn {

/// The token grid of one image segment of a sequence: frames x height x width tokens, in
/// (f, h, w) order (packed latents: height and width in 2x2 patches).
struct TokenGrid {
  int64_t frames = 1;
  int64_t height = 0;
  int64_t width = 0;
};

/// diffusers' QwenEmbedRope with scale_rope True, as QwenImageTransformer2DModel builds it
/// (models/transformers/transformer_qwenimage.py). Per axis a (width d_a), tables of unit complex
/// numbers cis(p * theta^(-2j/d_a)) for the positions p in [0, 4096) and [-4096, 0), built as
/// diffusers builds them (float32 frequencies and angles, torch.polar in float32 on the CPU,
/// complex64), then only looked up, so the values are diffusers' bit for bit.
/// - Image segment s (frames F, height H, width W): token (f, h, w) at frame position s + f,
///   height position h - (H - H/2) (rows -(H - H/2) .. H/2 - 1: centred), width likewise.
/// - Text token j at position m + j on every axis, m = max over the segments of max(H/2, W/2).
class MSRope {
 public:
  /// The table length per sign (diffusers' arange(4096)): every position must be in [-4096, 4096).
  static constexpr int64_t kTableLength = 4096;

  /// Every axes_dims entry must be even and positive (three entries: frame, height, width).
  MSRope(double theta, std::vector<int64_t> axes_dims);

  struct Freqs {
    at::Tensor image;  ///< complex64 [sum over segments of F*H*W, sum(axes_dims)/2]
    at::Tensor text;   ///< complex64 [text_len, sum(axes_dims)/2]
  };

  /// The factors for an image sequence made of `segments` (in order) and `text_len` text tokens,
  /// on `device`. Throws dpinfer::Error when a segment is empty or a position falls outside the
  /// tables. The tables are built on the CPU on the first call and copied to each device once.
  Freqs operator()(const std::vector<TokenGrid>& segments, int64_t text_len, const at::Device& device);

  const std::vector<int64_t>& axes_dims() const { return axes_dims_; }

 private:
  double theta_;
  std::vector<int64_t> axes_dims_;
  // Per axis: [kTableLength, d_a/2] complex64 for positions 0..4095 and -4096..-1.
  std::vector<at::Tensor> cpu_pos_, cpu_neg_, pos_, neg_;
};

}  // namespace dpinfer::pipeline::nn

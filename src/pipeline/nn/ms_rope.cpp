#include "dpinfer/pipeline/nn/ms_rope.h"

#include <algorithm>
#include <string>
#include <utility>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {
namespace {

// Ref: transformer_qwenimage.py QwenEmbedRope.rope_params: torch.outer(index, 1.0 / torch.pow(theta,
// arange(0, d, 2).to(float32).div(d))), then torch.polar. Python's 1.0 / t is t.reciprocal() * 1.0;
// outer of the int64 index and the float32 frequencies is a float32 product.
at::Tensor rope_table(const at::Tensor& index, int64_t dim, double theta) {
  const at::Tensor exponent = at::arange(0, dim, 2).to(at::kFloat).div(dim);
  const at::Tensor freqs = at::pow(theta, exponent).reciprocal() * 1.0;  // [d/2] float32
  const at::Tensor angles = at::outer(index, freqs);                     // [4096, d/2] float32
  return at::polar(at::ones_like(angles), angles);                       // complex64
}

std::string grid_text(const TokenGrid& g) {
  return "(" + std::to_string(g.frames) + ", " + std::to_string(g.height) + ", " + std::to_string(g.width) + ")";
}

}  // namespace

MSRope::MSRope(double theta, std::vector<int64_t> axes_dims) : theta_(theta), axes_dims_(std::move(axes_dims)) {
  if (axes_dims_.size() != 3) throw Error("msrope: axes_dims must have 3 entries (frame, height, width)");
  for (int64_t d : axes_dims_)
    if (d <= 0 || d % 2 != 0) throw Error("msrope: every axes_dims entry must be even and positive");
}

MSRope::Freqs MSRope::operator()(const std::vector<TokenGrid>& segments, int64_t text_len, const at::Device& device) {
  if (cpu_pos_.empty()) {
    // Ref: QwenEmbedRope.__init__: pos_index = arange(4096), neg_index = arange(4096).flip(0) * -1 - 1.
    const at::Tensor pos_index = at::arange(kTableLength);
    const at::Tensor neg_index = at::arange(kTableLength).flip(0) * -1 - 1;
    for (int64_t d : axes_dims_) {
      cpu_pos_.push_back(rope_table(pos_index, d, theta_));
      cpu_neg_.push_back(rope_table(neg_index, d, theta_));
    }
  }
  if (pos_.empty() || pos_[0].device() != device) {
    pos_.clear();
    neg_.clear();
    for (size_t a = 0; a < cpu_pos_.size(); ++a) {
      pos_.push_back(cpu_pos_[a].to(device));
      neg_.push_back(cpu_neg_[a].to(device));
    }
  }

  // Ref: QwenEmbedRope.forward and _compute_video_freqs (scale_rope True).
  if (segments.empty()) throw Error("msrope: no image segments");
  std::vector<at::Tensor> parts;
  int64_t max_index = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const TokenGrid& g = segments[s];
    const int64_t f = g.frames, h = g.height, w = g.width, first_frame = static_cast<int64_t>(s);
    if (f < 1 || h < 1 || w < 1)
      throw Error("msrope: image segment " + std::to_string(s) + " " + grid_text(g) + " is empty");
    if (first_frame + f > kTableLength || h - h / 2 > kTableLength || w - w / 2 > kTableLength)
      throw Error("msrope: image segment " + std::to_string(s) + " " + grid_text(g) +
                  " needs positions beyond the 4096-entry rope tables");
    // Centred: rows -(n - n/2) .. -1 from the negative table, then 0 .. n/2 - 1.
    auto centred = [&](size_t axis, int64_t n) {
      return at::cat({neg_[axis].narrow(0, kTableLength - (n - n / 2), n - n / 2), pos_[axis].narrow(0, 0, n / 2)});
    };
    const at::Tensor frame = pos_[0].narrow(0, first_frame, f).view({f, 1, 1, -1}).expand({f, h, w, -1});
    const at::Tensor height = centred(1, h).view({1, h, 1, -1}).expand({f, h, w, -1});
    const at::Tensor width = centred(2, w).view({1, 1, w, -1}).expand({f, h, w, -1});
    parts.push_back(at::cat({frame, height, width}, -1).reshape({f * h * w, -1}));
    max_index = std::max({max_index, h / 2, w / 2});
  }
  if (text_len < 0 || max_index + text_len > kTableLength)
    throw Error("msrope: " + std::to_string(text_len) + " text tokens after image position " +
                std::to_string(max_index) + " need positions beyond the 4096-entry rope tables");
  const at::Tensor text = at::cat({pos_[0].narrow(0, max_index, text_len), pos_[1].narrow(0, max_index, text_len),
                                   pos_[2].narrow(0, max_index, text_len)},
                                  -1);
  return {at::cat(parts), text};
}

}  // namespace dpinfer::pipeline::nn

// Ref: diffusers 0.36.0 hooks/first_block_cache.py (FBCHeadBlockHook, FBCBlockHook with is_tail).
#include "dpinfer/pipeline/nn/first_block_cache.h"

namespace dpinfer::pipeline::nn {

Streams FirstBlockCache::run(const Streams& input, const std::function<Streams(const Streams&)>& head,
                             const std::function<Streams(const Streams&, const at::Tensor& rows)>& rest) {
  const Streams first = head(input);
  const at::Tensor residual = first.image - input.image;  // [B, L_img, D]
  const int64_t batch = residual.size(0);
  std::vector<int64_t> compute;
  for (int64_t b = 0; b < batch; ++b) {
    // _should_compute_remaining_blocks on this image alone: the abs-mean of the change in the first block's
    // residual over the abs-mean of the last computed one, each a 0-d tensor in the run dtype, divided
    // there, then compared as a Python float.
    bool must = !head_residual_.defined();
    if (!must) {
      const at::Tensor now = residual.narrow(0, b, 1), before = head_residual_.narrow(0, b, 1);
      const at::Tensor absmean = (now - before).abs().mean();
      must = (absmean / before.abs().mean()).item<double>() > threshold_;
    }
    if (must) compute.push_back(b);
  }
  calls_ += batch;
  skipped_ += batch - static_cast<int64_t>(compute.size());
  const int64_t n = static_cast<int64_t>(compute.size());
  if (n == batch) {
    // Every image computes (always so at the first step): the whole batch as it comes.
    const at::Tensor all = at::arange(batch, at::TensorOptions().dtype(at::kLong).device(residual.device()));
    Streams last = rest(first, all);
    head_residual_ = residual;
    tail_image_ = last.image - first.image;
    tail_text_ = last.text - first.text;
    return last;
  }
  // The cached images: the first block's output plus the residuals of the last call that computed them.
  Streams out{tail_image_ + first.image, tail_text_ + first.text};
  if (n == 0) return out;
  const at::Tensor rows = at::tensor(compute, at::kLong).to(residual.device());
  const Streams part{first.image.index_select(0, rows), first.text.index_select(0, rows)};
  const Streams last = rest(part, rows);
  out.image.index_copy_(0, rows, last.image);
  out.text.index_copy_(0, rows, last.text);
  head_residual_.index_copy_(0, rows, residual.index_select(0, rows));
  tail_image_.index_copy_(0, rows, last.image - part.image);
  tail_text_.index_copy_(0, rows, last.text - part.text);
  return out;
}

void FirstBlockCache::count_into(nlohmann::json& statistics) const {
  statistics["denoiser_calls"] = statistics.value("denoiser_calls", int64_t{0}) + calls_;
  statistics["denoiser_calls_cached"] = statistics.value("denoiser_calls_cached", int64_t{0}) + skipped_;
  statistics["step_cache"] = "First Block Cache";
  statistics["step_cache_skip"] = "skipped the blocks after the first";
}

}  // namespace dpinfer::pipeline::nn

// Ref: diffusers 0.36.0 hooks/first_block_cache.py (FBCHeadBlockHook, FBCBlockHook with is_tail).
#include "dpinfer/pipeline/nn/first_block_cache.h"

#include <vector>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {

Streams FirstBlockCache::run(const Streams& input, int64_t num_blocks, const BlockRange& blocks,
                             const ImageRows& images) {
  // diffusers registers First Block Cache for no transformer that runs an image's CFG rows in one call.
  if (!images.rows.empty()) throw Error("first_block_cache: rows grouped by image are not supported");
  if (num_blocks < 2) throw InputError("first_block_cache: the transformer needs two blocks or more");
  const Streams first = blocks(0, 1, input, {});
  const at::Tensor residual = first.image - input.image;  // [B, L_img, D]
  const int64_t batch = residual.size(0);
  std::vector<int64_t> compute;
  for (int64_t b = 0; b < batch; ++b) {
    // _should_compute_remaining_blocks on this image alone, compared as a Python float.
    const bool must = !head_residual_.defined() ||
                      relative_change(residual.narrow(0, b, 1), head_residual_.narrow(0, b, 1)) > threshold_;
    if (must) compute.push_back(b);
  }
  count(batch, batch - static_cast<int64_t>(compute.size()));
  const int64_t n = static_cast<int64_t>(compute.size());
  if (n == batch) {
    // Every image computes (always so at the first step): the whole batch as it comes.
    Streams last = blocks(1, num_blocks, first, {});
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
  const Streams last = blocks(1, num_blocks, part, rows);
  out.image.index_copy_(0, rows, last.image);
  out.text.index_copy_(0, rows, last.text);
  head_residual_.index_copy_(0, rows, residual.index_select(0, rows));
  tail_image_.index_copy_(0, rows, last.image - part.image);
  tail_text_.index_copy_(0, rows, last.text - part.text);
  return out;
}

}  // namespace dpinfer::pipeline::nn

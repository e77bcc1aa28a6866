#pragma once
// First Block Cache (ParaAttention's "dynamic caching"), as diffusers 0.36 applies it to a dual-stream
// transformer's blocks (hooks/first_block_cache.py, FirstBlockCacheConfig(threshold)): the first block
// always runs; when its residual changed little since the last step that ran every block, the other
// blocks are skipped and their last residual is added instead.
//
// diffusers decides once per batch, from the mean over the whole batch, so an image would depend on its
// batch-mates. dpinfer decides per image, from that image's own rows: for a batch of one it is diffusers'
// decision, and an image is the same whatever batch it is made in. The rows that must compute run the
// remaining blocks as a smaller batch.

#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace dpinfer::pipeline::nn {

/// The two streams between dual-stream blocks: image tokens [B, L_img, D], text tokens [B, L_txt, D].
struct Streams {
  at::Tensor image, text;
};

/// One cache context's state over a denoising run (diffusers' FBCSharedBlockState, per image): make one per
/// context ("cond", "uncond") per batch, as diffusers' state lives from one pipeline call to its end.
class FirstBlockCache {
 public:
  explicit FirstBlockCache(double threshold) : threshold_(threshold) {}

  /// The blocks with the cache. `head` runs the first block on the whole batch. `rest(streams, rows)` runs
  /// every other block on `streams`, the rows `rows` ([R] long, on the streams' device) of the batch, and
  /// returns the last block's output. Returns the last block's output for the whole batch: computed for
  /// the images that must compute, the first block's output plus the cached residuals for the others.
  Streams run(const Streams& input, const std::function<Streams(const Streams&)>& head,
              const std::function<Streams(const Streams&, const at::Tensor& rows)>& rest);

  /// Denoiser calls so far, and how many of them skipped the remaining blocks, counted per image.
  int64_t calls() const { return calls_; }
  int64_t skipped() const { return skipped_; }

  /// Adds calls() and skipped() to a pipeline's statistics() object, and names the cache there ("step_cache",
  /// "step_cache_skip": what a cached call skipped, for the run's last log line).
  void count_into(nlohmann::json& statistics) const;

 private:
  double threshold_;
  // Per image (row), from the last call that computed it: the first block's image residual, and the
  // remaining blocks' residuals over the first block's output.
  at::Tensor head_residual_, tail_image_, tail_text_;
  int64_t calls_ = 0, skipped_ = 0;
};

}  // namespace dpinfer::pipeline::nn

#pragma once
// What the step caches of a dual-stream transformer's blocks share: First Block Cache (diffusers,
// nn/first_block_cache.h) and DBCache with TaylorSeer (cache-dit, nn/dbcache.h). A transformer hands its
// blocks to a cache as one list, FLUX.1's double-stream blocks then its single-stream ones, and the cache
// decides which of them run for which images.
//
// The references decide once per batch, from a mean over the whole batch, so an image would depend on its
// batch-mates. dpinfer decides per image, from that image's own rows: for a batch of one it is the
// reference's decision, and an image is the same whatever batch it is made in. The rows that must compute
// run the cached blocks as a smaller batch.

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace dpinfer::pipeline::nn {

/// The two streams between dual-stream blocks: image tokens [B, L_img, D], text tokens [B, L_txt, D]. Between
/// single-stream blocks (DBCache's Pattern_3 lists: Chroma's), `image` is the joint sequence and `text` undefined.
struct Streams {
  at::Tensor image, text;
};

/// Runs the transformer's blocks [begin, end) of its list on `streams`, which hold the rows `rows` ([R] long,
/// on the streams' device) of the batch, or all of it when `rows` is undefined; returns the last block's output.
using BlockRange =
    std::function<Streams(int64_t begin, int64_t end, const Streams& streams, const at::Tensor& rows)>;

/// Which rows of a batch are which image, for a transformer that runs an image's classifier-free guidance rows in one
/// call (Z-Image: prompts then negatives, so image b has rows b and B + b): the cache decides once per image, from all
/// its rows, as the reference decides once per call and so per image at batch 1. Also how many leading tokens of
/// those rows the decision reads: the batch pads every row to its longest, and an image reads only as far as its own
/// rows reach, so that its decision does not depend on its batch-mates. Empty: row b is image b, every token.
struct ImageRows {
  std::vector<std::vector<int64_t>> rows;  ///< per image, its rows of the batch, ascending
  std::vector<int64_t> tokens;             ///< per image, the tokens its decision reads; empty: every token
};

/// One cache context's state over a denoising run, per image: make one per context ("cond", "uncond") per
/// batch, as the references' state lives from one pipeline call to its end.
class BlockCache {
 public:
  virtual ~BlockCache() = default;

  /// The transformer's `num_blocks` blocks, run by `blocks`, on `input` (the first block's input), under the
  /// cache. Returns the last block's output for the whole batch.
  /// `images` groups the batch's rows by image (ImageRows); a cache that cannot group throws.
  virtual Streams run(const Streams& input, int64_t num_blocks, const BlockRange& blocks, const ImageRows& images) = 0;
  Streams run(const Streams& input, int64_t num_blocks, const BlockRange& blocks) {
    return run(input, num_blocks, blocks, ImageRows{});
  }

  /// Denoiser calls so far, and how many of them skipped the cached blocks, counted per image.
  int64_t calls() const { return calls_; }
  int64_t skipped() const { return skipped_; }

  /// Adds calls() and skipped() to a pipeline's statistics() object ("denoiser_calls", "denoiser_calls_cached"),
  /// and names the cache there ("step_cache", "step_cache_skip": what a cached call skipped, for the run's last
  /// log line).
  void count_into(nlohmann::json& statistics) const;
  /// The cache's name ("First Block Cache", "DBCache") and what a cached call skips, in words.
  virtual const char* name() const = 0;
  virtual const char* skips() const = 0;

 protected:
  /// Counts one call of a batch of `batch` images, `skipped` of which skipped the cached blocks.
  void count(int64_t batch, int64_t skipped) {
    calls_ += batch;
    skipped_ += skipped;
  }

 private:
  int64_t calls_ = 0, skipped_ = 0;
};

/// The references' relative change of one image's residual: the abs-mean of `now - before` over the abs-mean of
/// `before`, each a 0-d tensor in the run dtype, divided there, then read as a double (Python's float).
/// (diffusers' _should_compute_remaining_blocks and cache-dit's similarity() compute it so; |b - a| is |a - b|.)
double relative_change(const at::Tensor& now, const at::Tensor& before);

}  // namespace dpinfer::pipeline::nn

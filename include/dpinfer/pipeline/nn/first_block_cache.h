#pragma once
// First Block Cache (ParaAttention's "dynamic caching"), as diffusers 0.36 applies it to a dual-stream
// transformer's blocks (hooks/first_block_cache.py, FirstBlockCacheConfig(threshold)): the first block
// always runs; when its residual changed little since the last step that ran every block, the other
// blocks are skipped and their last residual is added instead. Decided per image (nn/block_cache.h).

#include "dpinfer/pipeline/nn/block_cache.h"

namespace dpinfer::pipeline::nn {

/// diffusers' FBCSharedBlockState, per image.
class FirstBlockCache : public BlockCache {
 public:
  explicit FirstBlockCache(double threshold) : threshold_(threshold) {}

  /// Runs block 0 on the whole batch and blocks 1.. on the images that must compute; the others get block 0's
  /// output plus the residuals cached for them. Throws InputError for fewer than two blocks.
  Streams run(const Streams& input, int64_t num_blocks, const BlockRange& blocks, const ImageRows& images) override;
  using BlockCache::run;
  const char* name() const override { return "First Block Cache"; }
  const char* skips() const override { return "skipped the blocks after the first"; }

 private:
  double threshold_;
  // Per image (row), from the last call that computed it: the first block's image residual, and the
  // remaining blocks' residuals over the first block's output.
  at::Tensor head_residual_, tail_image_, tail_text_;
};

}  // namespace dpinfer::pipeline::nn

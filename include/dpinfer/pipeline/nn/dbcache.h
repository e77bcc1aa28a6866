#pragma once
// DBCache ("Dual Block Cache") with the TaylorSeer calibrator, as cache-dit 1.5.3 applies it to a dual-stream
// transformer's blocks (cache_dit.enable_cache(pipe, cache_config=DBCacheConfig(...),
// calibrator_config=TaylorSeerCalibratorConfig(...)); caching/cache_blocks/pattern_base.py
// CachedBlocks_Pattern_Base.forward, caching/cache_contexts/cache_manager.py, cache_context.py,
// calibrators/taylorseer.py). The N blocks split into the first Fn (always run), the middle ones and the last
// Bn (always run). After max_warmup_steps steps, when the Fn blocks' image residual changed by less than
// residual_diff_threshold (relative abs-mean, against the last step that ran the middle blocks), the middle
// blocks are skipped and their residuals, image and text, are added instead: the last ones computed or, with
// TaylorSeer, their Taylor extrapolation from the computed steps. Decided per image (nn/block_cache.h).

#include <cstdint>
#include <vector>

#include "dpinfer/pipeline/nn/block_cache.h"

namespace dpinfer::pipeline::nn {

/// DBCacheConfig's fields dpinfer takes, with its defaults (cache-dit 1.5.3 caching/cache_contexts/
/// cache_config.py BasicCacheConfig), and TaylorSeerCalibratorConfig's taylorseer_order (0: no calibrator).
struct DBCacheOptions {
  double threshold = 0.08;       ///< residual_diff_threshold; 1 or more: every step after the warm-up skips
  int64_t fn = 8;                ///< Fn_compute_blocks (>= 1)
  int64_t bn = 0;                ///< Bn_compute_blocks
  int64_t warmup = 8;            ///< max_warmup_steps: steps 0 .. warmup-1 run every block (warmup_interval 1)
  int64_t max_cached = -1;       ///< max_cached_steps: no skip once that many did (-1: no limit)
  int64_t max_continuous = -1;   ///< max_continuous_cached_steps: no skip after that many in a row (-1: none)
  int64_t taylorseer_order = 0;  ///< TaylorSeerCalibratorConfig(taylorseer_order), image and text residuals
};

/// TaylorSeerState (calibrators/taylorseer.py) of one residual of one image: the derivatives at the last
/// computed step, by finite differences over the step indices, and their Taylor series at a skipped step.
class TaylorSeer {
 public:
  explicit TaylorSeer(int64_t order) : order_(order) {}
  /// mark_step_begin: the next step. cache-dit creates the state at its first update, after that step's
  /// mark_step_begin, so its step count runs one behind the context's; so does this one.
  void begin_step() {
    if (created_) ++step_;
  }
  /// update(Y): Y computed at this step.
  void update(const at::Tensor& y);
  /// approximate(): the series at this step.
  at::Tensor approximate() const;

 private:
  int64_t order_;
  bool created_ = false;
  int64_t step_ = -1, last_computed_ = -1;
  std::vector<at::Tensor> previous_, current_;  // dY_prev, dY_current: [Y, dY, d2Y, ...], undefined past the known
};

class DBCache : public BlockCache {
 public:
  explicit DBCache(const DBCacheOptions& options) : options_(options) {}

  /// Runs blocks [0, Fn) and [N - Bn, N) on the whole batch and [Fn, N - Bn) on the images that compute. Throws
  /// InputError when Fn + Bn leaves no block between them.
  Streams run(const Streams& input, int64_t num_blocks, const BlockRange& blocks, const ImageRows& images) override;
  using BlockCache::run;
  const char* name() const override { return "DBCache"; }
  const char* skips() const override { return "skipped the cached middle blocks"; }

 private:
  /// One image's CachedContext (of one of the "cond" and "uncond" contexts, i.e. cache-dit's non-CFG or CFG
  /// half of it with enable_separate_cfg).
  struct Image {
    int64_t step = -1;         // get_current_step()
    int64_t cached = 0;        // len(cached_steps)
    int64_t last_cached = -2;  // cached_steps[-1], or none
    int64_t continuous = 0;    // continuous_cached_steps
    at::Tensor fn_residual;    // the Fn buffer: [1, L_img, D], from the last computed step
    at::Tensor image, text;    // the Bn buffers without TaylorSeer: the middle blocks' residuals, [1, L, D]
    bool middle_text = false;  // the middle blocks returned a text stream (and `text` or text_seer holds its residual)
    TaylorSeer image_seer{0}, text_seer{0};
  };
  /// mark_step_begin, then can_cache for this image's Fn residual `residual` ([1, L_img, D]).
  bool begin_step_and_decide(Image& image, const at::Tensor& residual) const;
  /// The Bn buffers, set from a computed step's middle-block residuals ([1, L, D]).
  void store(Image& image, const at::Tensor& residual, const at::Tensor& image_residual,
             const at::Tensor& text_residual) const;

  DBCacheOptions options_;
  std::vector<Image> images_;
};

}  // namespace dpinfer::pipeline::nn

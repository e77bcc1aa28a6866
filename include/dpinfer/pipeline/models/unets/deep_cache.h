#pragma once
// DeepCache (Ma, Fang and Wang, "DeepCache: Accelerating Diffusion Models for Free", CVPR 2024) for the UNet of SD
// 1.x/2.x and SDXL, as the reference implementation computes it: the PyPI package DeepCache 0.1.1,
// DeepCache/extension/deepcache.py, DeepCacheSDHelper (set_params(cache_interval, cache_branch_id), enable()).
//
// What the reference does. It replaces the forward of the UNet, of each down, mid and up block, and of each of
// their resnets, attentions and samplers with a wrapper (wrap_modules). The UNet's wrapper notes the position of
// the call's timestep in the scheduler's whole schedule, list(scheduler.timesteps).index(t): the FIRST index with
// that value (wrap_unet_forward). A module's wrapper asks is_skip_step(block_i, layer_i, type): a call whose
// position p has (p - p0) % cache_interval == 0, p0 the first call's position, runs every module and keeps each
// one's output (a "full" call); any other call (a "shallow" one) returns the kept output of every module past
// the branch, so only the shallow branch computes. The branch is cache_branch_id = 3 * block + layer. Down
// block i (0 = the top, full resolution) and up block i (counted from the bottom of diffusers' up_blocks, so
// that it mirrors down block i) are skipped for i > block, the mid block always; in down block `block`, the
// layers (resnet, and attention where the block has them) with index >= layer are skipped, and its downsampler
// (layer index = its resnet count) too when that is >= layer; in up block `block`, whose layers the reference
// numbers from its last (layer_num - 1 - j for resnets[j]), those numbered above `layer`.
//
// What that computes, and what dpinfer computes (UNet2DConditionModelImpl::forward with a DeepCache): a shallow
// call runs conv_in, the time embedding, down blocks 0 .. block-1, the first min(layer, resnets) layers of down
// block `block` (the skips the fresh up layers take: every other down output feeds only skipped modules), then
// up block `block` from its layer j0 = max(0, layers - 1 - layer) on, whose input is the feature kept by the last
// full call (the hidden state entering layer j0 of that up block: the output of its layer j0 - 1, or of the up
// block below it, or of the mid block), then the up blocks above and conv_out. The reference's wasted work (the
// skipped layers' concatenations of their skips, a downsampler whose output only skipped blocks read) is not
// done; it changes no value. Every computed op is the full UNet's, so a full call is bit for bit the UNet
// without DeepCache and a shallow one bit for bit the reference's.
//
// The decision is a function of the call's position in the schedule alone, never of the batch, so an image is
// the same alone or batched (under CFG the batch is [uncond; cond], one UNet call, as in diffusers).
// Positions: a schedule that repeats a timestep (PNDM's PLMS steps: 901, 801, 801, 701, ...) gives both calls
// of the repeated value the first one's position, as the reference's list.index does, so with interval 2 the
// calls go full, shallow, shallow, full, shallow, full, ... The first call is always full.

#include <cstdint>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace dpinfer::pipeline {

/// One denoising run's DeepCache state (the reference's DeepCacheSDHelper after enable(); make one per batch).
class DeepCache {
 public:
  /// `interval` >= 1 (cache_interval: 1 runs every call in full), `branch_id` >= 0 (cache_branch_id). Throws
  /// InputError outside those ranges.
  DeepCache(int64_t interval, int64_t branch_id);

  /// Call before each UNet call of the run: `timesteps` the scheduler's whole schedule [S] (any dtype, any device),
  /// `index` the index of this call's timestep in it, `images` the images this call denoises (B, however many rows
  /// CFG gives the UNet). Decides whether the call is full.
  void next_call(const at::Tensor& timesteps, int64_t index, int64_t images);

  /// This call runs the whole UNet and keeps the feature (else only the shallow branch, from the kept feature).
  bool full() const { return full_; }
  /// cache_branch_id // 3: the down block the branch ends in (and the up block that mirrors it).
  int64_t block() const { return block_; }
  /// cache_branch_id % 3: the layer of that block.
  int64_t layer() const { return layer_; }
  /// The layer of the mirroring up block (of `up_layers` layers) whose input is the kept feature: the first
  /// layer a shallow call runs there.
  int64_t entry_layer(int64_t up_layers) const;

  /// The feature of the last full call: the hidden state [B or 2B, C, h, w] entering up block block()'s
  /// entry_layer(). Set by the UNet on a full call, read on a shallow one.
  at::Tensor feature;

  /// UNet calls so far, per image, and how many of them were shallow.
  int64_t calls() const { return calls_; }
  int64_t shallow() const { return shallow_; }
  /// Adds calls() and shallow() to a pipeline's statistics() object ("denoiser_calls", "denoiser_calls_cached")
  /// and names the cache there ("step_cache", "step_cache_skip").
  void count_into(nlohmann::json& statistics) const;

 private:
  int64_t interval_, block_, layer_;
  int64_t start_ = -1;  ///< the first call's position; -1 before it
  bool full_ = true;
  int64_t calls_ = 0, shallow_ = 0;
};

}  // namespace dpinfer::pipeline

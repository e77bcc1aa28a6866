#pragma once
// The step caches a batch's denoiser calls run under (nn/block_cache.h), from its family settings:
// first_block_cache (diffusers' First Block Cache) or dbcache and its options (cache-dit's DBCache with
// TaylorSeer). FLUX.1 and Qwen-Image take them.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/nn/block_cache.h"
#include "dpinfer/pipeline/nn/dbcache.h"

namespace dpinfer::pipeline {

/// The DBCache options in complete `settings` (resolve_settings()), or threshold 0 when dbcache is off.
nn::DBCacheOptions dbcache_options(const nlohmann::json& settings);

/// check_settings()'s part for the caches, for a transformer of `num_blocks` blocks (FLUX.1: double- then
/// single-stream; Chroma: the shorter of its two lists, which it caches apart, and `blocks` says so): refuses
/// first_block_cache with dbcache, DBCache's options without dbcache, and dbcache_fn + dbcache_bn that leave no block
/// to cache. Throws InputError, one line.
void check_block_cache_settings(const nlohmann::json& settings, int64_t num_blocks,
                                const std::string& blocks = "blocks");

/// A batch's cache states: one for the prompt's calls (diffusers' and the pipelines' cache_context("cond"),
/// cache-dit's non-CFG steps) and one for true CFG's negative ones ("uncond", cache-dit's CFG steps with
/// enable_separate_cfg), fresh per batch as the references reset theirs per pipeline call; and that per block
/// list the transformer caches apart (`lists`: Chroma's double- and single-stream lists are two, as cache-dit's
/// Chroma adapter caches them, each its own context; FLUX.1's and Qwen-Image's one). All null when the settings ask
/// for no cache.
class BlockCaches {
 public:
  explicit BlockCaches(const nlohmann::json& settings, int lists = 1);
  nn::BlockCache* cond(int list = 0) const { return cond_.empty() ? nullptr : cond_.at(list).get(); }
  nn::BlockCache* uncond(int list = 0) const { return uncond_.empty() ? nullptr : uncond_.at(list).get(); }
  /// Adds every state's counts to a pipeline's statistics() (nn::BlockCache::count_into): with two lists, a call
  /// counts once per list.
  void count_into(nlohmann::json& statistics) const;

 private:
  std::vector<std::unique_ptr<nn::BlockCache>> cond_, uncond_;
};

}  // namespace dpinfer::pipeline

#include "block_caches.h"

#include <string>
#include <utility>

#include "dpinfer/pipeline/nn/first_block_cache.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

nn::DBCacheOptions dbcache_options(const nlohmann::json& settings) {
  nn::DBCacheOptions o;
  o.threshold = settings.value("dbcache", 0.0);
  o.fn = settings.value("dbcache_fn", o.fn);
  o.bn = settings.value("dbcache_bn", o.bn);
  o.warmup = settings.value("dbcache_warmup", o.warmup);
  o.max_cached = settings.value("dbcache_max_cached", o.max_cached);
  o.max_continuous = settings.value("dbcache_max_continuous", o.max_continuous);
  o.taylorseer_order = settings.value("taylorseer_order", o.taylorseer_order);
  return o;
}

void check_block_cache_settings(const nlohmann::json& settings, int64_t num_blocks, const std::string& blocks) {
  const nn::DBCacheOptions o = dbcache_options(settings);
  if (o.threshold > 0 && settings.value("first_block_cache", 0.0) > 0)
    throw InputError("first_block_cache and dbcache: two step caches for the same blocks; set one of them");
  if (o.threshold <= 0) {
    // DBCache's options mean nothing without it: a value other than the default is refused, not recorded.
    const nn::DBCacheOptions d;
    const std::pair<const char*, int64_t> options[] = {
        {"dbcache_fn", o.fn - d.fn},
        {"dbcache_bn", o.bn - d.bn},
        {"dbcache_warmup", o.warmup - d.warmup},
        {"dbcache_max_cached", o.max_cached - d.max_cached},
        {"dbcache_max_continuous", o.max_continuous - d.max_continuous},
        {"taylorseer_order", o.taylorseer_order - d.taylorseer_order}};
    for (const auto& [key, change] : options)
      if (change != 0)
        throw InputError(std::string(key) + " is an option of DBCache, which is off (dbcache 0); set dbcache=THRESHOLD "
                                            "too, or drop it");
    return;
  }
  if (o.fn + o.bn >= num_blocks)
    throw InputError("dbcache_fn + dbcache_bn (" + std::to_string(o.fn) + " + " + std::to_string(o.bn) +
                     ") must be below this transformer's " + std::to_string(num_blocks) + " " + blocks +
                     ", leaving blocks in between to cache; lower them");
}

BlockCaches::BlockCaches(const nlohmann::json& settings, int lists) {
  const double fbc = settings.value("first_block_cache", 0.0);
  const nn::DBCacheOptions db = dbcache_options(settings);
  for (int i = 0; i < lists; ++i)
    for (auto* states : {&cond_, &uncond_}) {
      if (fbc > 0) states->push_back(std::make_unique<nn::FirstBlockCache>(fbc));
      else if (db.threshold > 0) states->push_back(std::make_unique<nn::DBCache>(db));
    }
}

void BlockCaches::count_into(nlohmann::json& statistics) const {
  for (const auto* states : {&cond_, &uncond_})
    for (const auto& state : *states) state->count_into(statistics);
}

}  // namespace dpinfer::pipeline

#pragma once
// A bounded LRU cache of text-encoder outputs, one entry per (encoding key, distinct texts
// of a batch): a dataset that repeats one negative prompt a million times encodes it once per
// run, not once per batch. The SD, SDXL and SD3 pipelines ask it for a batch's rows; the key
// holds what else changes the encoding (side, clip_skip, LoRAs), so that two settings never
// share an entry.
//
// An entry is a whole encoder call, not a text: in bf16 and fp16 a text's row rounds
// differently beside another number of texts (the matrix products' row count), so a row
// reused from another batch's call could differ from the row this batch's own call gives.
// Keyed by the batch's distinct texts in order, a hit is exactly what a miss would give, and
// an image stays a function of its batch alone (plan/batches.h), whatever ran before it on
// that rank.

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dpinfer::pipeline {

/// Entries per pipeline: one per (side, clip_skip, LoRAs, distinct texts of a batch)
/// recently used; for SDXL in fp16 some 0.3 MB per text of an entry (77 x 2048 + 1280 values).
constexpr size_t kPromptEmbeddingCacheEntries = 64;

class PromptEmbeddingCache {
 public:
  /// Encodes `texts` (distinct, none cached) in one call: each output tensor has one row
  /// per text along dim 0, e.g. {[N, 77, D]} for SD, {[N, 77, D], [N, P]} for SDXL.
  using Encoder = std::function<std::vector<at::Tensor>(const std::vector<std::string>& texts)>;

  /// Keeps at most `capacity` entries (0: none; every call encodes its texts, still once each).
  explicit PromptEmbeddingCache(size_t capacity) : capacity_(capacity) {}

  /// The outputs for `texts` under `key`, one row per text, in order ([B, ...] each): the
  /// entry of (key, the distinct texts in first-seen order) when there is one (it becomes the
  /// most recent), else one `encode` call on those distinct texts, then kept, the least
  /// recently used entries dropped.
  std::vector<at::Tensor> rows(const std::vector<std::string>& texts, const std::string& key, const Encoder& encode);

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  int64_t hits() const { return hits_; }      ///< calls answered from an entry
  int64_t misses() const { return misses_; }  ///< texts encoded (each distinct one of a call once)

 private:
  /// map key; each output for the distinct texts, [D, ...]
  using Entry = std::pair<std::string, std::vector<at::Tensor>>;
  void keep(std::string map_key, std::vector<at::Tensor> outputs);

  size_t capacity_;
  std::list<Entry> entries_;  ///< most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace dpinfer::pipeline

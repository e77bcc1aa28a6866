#pragma once
// A bounded LRU cache of text-encoder outputs, one entry per (text, encoding key): a
// dataset that repeats one negative prompt a million times encodes it once. The SD and
// SDXL pipelines ask it for a batch's rows; what it lacks is encoded in one call, each
// distinct text once, and kept. The key holds what else changes the encoding (clip_skip),
// so that two settings never share an entry.
//
// A reused row is the very tensor the encoder gave for that text, so a hit is the same
// embedding as a miss. A row encoded beside other texts may differ from one encoded
// beside others in float rounding only (as batching does: README, --batch-size).

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

/// Entries per SD/SDXL pipeline: one per distinct (text, side, clip_skip) recently used;
/// at most some 20 MB for SDXL in fp16 (77 x 2048 + 1280 values an entry).
constexpr size_t kPromptEmbeddingCacheEntries = 64;

class PromptEmbeddingCache {
 public:
  /// Encodes `texts` (distinct, none cached) in one call: each output tensor has one row
  /// per text along dim 0, e.g. {[N, 77, D]} for SD, {[N, 77, D], [N, P]} for SDXL.
  using Encoder = std::function<std::vector<at::Tensor>(const std::vector<std::string>& texts)>;

  /// Keeps at most `capacity` entries (0: none; every call encodes its texts, still once each).
  explicit PromptEmbeddingCache(size_t capacity) : capacity_(capacity) {}

  /// The outputs for `texts` under `key`, one row per text, in order ([B, ...] each): rows
  /// found are reused (and become the most recent), the others encoded by one `encode`
  /// call on their distinct texts, then kept, the least recently used entries dropped.
  std::vector<at::Tensor> rows(const std::vector<std::string>& texts, const std::string& key, const Encoder& encode);

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }  ///< texts encoded (each distinct one of a call once)

 private:
  using Entry = std::pair<std::string, std::vector<at::Tensor>>;  ///< map key; each output's row, [...] (no batch dim)
  void keep(std::string map_key, std::vector<at::Tensor> row);

  size_t capacity_;
  std::list<Entry> entries_;  ///< most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace dpinfer::pipeline

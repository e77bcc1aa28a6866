#pragma once
// The one cache of text-encoder outputs every family uses (issue 26): a bounded LRU cache, one
// entry per (encoding key, texts of one encoder call). A dataset that repeats one negative
// prompt a million times encodes it once per run, not once per batch. The key holds everything
// else that changes an encoding: the side, the encoder settings (clip_skip,
// max_sequence_length) and the LoRAs merged into the encoders (LoraPipeline::lora_key), so that
// two settings never share an entry.
//
// An entry is a whole encoder call, not a text: in bf16 and fp16 a text's row rounds
// differently beside another number of texts (the matrix products' row count), so a row
// reused from another batch's call could differ from the row this batch's own call gives.
// rows() serves the families that encode a batch's distinct texts in one call (SD, SDXL, SD3,
// Z-Image), keyed by those texts in order; each() the families that encode one text per call
// (FLUX.1, Chroma, Qwen-Image), keyed by the text. Either way a hit is exactly what a miss
// would give, and an image stays a function of its batch alone (plan/batches.h), whatever ran
// before it on that rank.
//
// Two-phase chunks (TextToImage::prepare) pin the entries of the chunk they encode: those are
// neither dropped nor counted against the bound until the next chunk begins, so the chunk's
// size alone bounds their memory. With store_on_host(), entries live in host memory (pinned,
// for a CUDA device) and go back to the encoder's device when used: the copies are exact.

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dpinfer::pipeline {

/// Entries per pipeline: one per (side, settings, LoRAs, texts of a call) recently used; for
/// SDXL in fp16 some 0.3 MB per text of an entry (77 x 2048 + 1280 values).
constexpr size_t kPromptEmbeddingCacheEntries = 64;
/// Bytes of entries per pipeline, beside the count: a T5 or Qwen text at 512 tokens is 4 to 8 MB.
constexpr size_t kPromptEmbeddingCacheBytes = size_t{256} << 20;

class PromptEmbeddingCache {
 public:
  /// Encodes `texts` (distinct, none cached) in one call: each output tensor has one row
  /// per text along dim 0, e.g. {[N, 77, D]} for SD, {[N, 77, D], [N, P]} for SDXL.
  using Encoder = std::function<std::vector<at::Tensor>(const std::vector<std::string>& texts)>;
  /// Encodes one text alone: its output tensors, of any shapes.
  using EncodeOne = std::function<std::vector<at::Tensor>(const std::string& text)>;

  /// Keeps at most `capacity` entries (0: none; every call encodes its texts, still once each)
  /// of at most `max_bytes` together, pinned entries aside.
  explicit PromptEmbeddingCache(size_t capacity, size_t max_bytes = std::numeric_limits<size_t>::max())
      : capacity_(capacity), max_bytes_(max_bytes) {}

  /// The outputs for `texts` under `key`, one row per text, in order ([B, ...] each): the
  /// entry of (key, the distinct texts in first-seen order) when there is one (it becomes the
  /// most recent), else one `encode` call on those distinct texts, then kept, the least
  /// recently used entries dropped.
  std::vector<at::Tensor> rows(const std::vector<std::string>& texts, const std::string& key, const Encoder& encode);

  /// Each text's outputs under `key`, in order: the entry of (key, text) when there is one,
  /// else one `encode` call on that text alone, then kept. New tensors: the caller may change them.
  std::vector<std::vector<at::Tensor>> each(const std::vector<std::string>& texts, const std::string& key,
                                            const EncodeOne& encode);

  /// Keep entries in host memory from now on (two-phase chunks on a CUDA device).
  void store_on_host(bool on) { on_host_ = on; }
  /// A chunk begins: the last chunk's entries become ordinary entries (the bound applies to them
  /// again), and every entry used until end_chunk() is pinned.
  void begin_chunk();
  /// The chunk's encodings are all in: entries used from now on are not pinned.
  void end_chunk() { pinning_ = false; }

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return bytes_; }     ///< of every entry, pinned ones included
  size_t pinned() const { return pinned_; }   ///< entries pinned by the chunk
  int64_t hits() const { return hits_; }      ///< calls answered from an entry
  int64_t misses() const { return misses_; }  ///< texts encoded (each distinct one of a call once)

 private:
  struct Entry {
    std::string key;                  ///< the map key
    std::vector<at::Tensor> outputs;  ///< as the encoder gave them, on the host with on_host_
    at::Device device = at::kCPU;     ///< where the encoder gave them
    size_t bytes = 0;
    bool pinned = false;
  };
  /// The outputs of entry `map_key` on their encoder's device, or an empty list; a hit.
  std::vector<at::Tensor> find(const std::string& map_key);
  void keep(std::string map_key, const std::vector<at::Tensor>& outputs);
  void pin(Entry& e);
  /// Drops the least recently used unpinned entries past the bound.
  void trim();

  size_t capacity_;
  size_t max_bytes_;
  bool on_host_ = false;
  bool pinning_ = false;
  std::list<Entry> entries_;  ///< most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0, pinned_ = 0, pinned_bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace dpinfer::pipeline

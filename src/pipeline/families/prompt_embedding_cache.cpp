#include "dpinfer/pipeline/families/prompt_embedding_cache.h"

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

/// The map key of `texts` under `key`: '\0' ends the key (no key holds one); each text is
/// length-prefixed, so no list of texts reads as another.
std::string map_key_of(const std::string& key, const std::vector<std::string>& texts) {
  std::string map_key = key + '\0';
  for (const std::string& t : texts) map_key += std::to_string(t.size()) + ':' + t;
  return map_key;
}

}  // namespace

std::vector<at::Tensor> PromptEmbeddingCache::rows(const std::vector<std::string>& texts, const std::string& key,
                                                   const Encoder& encode) {
  // The distinct texts in first-seen order, and where each text's row is among them.
  std::vector<std::string> distinct;
  std::unordered_map<std::string, int64_t> position;
  std::vector<int64_t> row_of;
  for (const std::string& t : texts) {
    auto [it, added] = position.emplace(t, static_cast<int64_t>(distinct.size()));
    if (added) distinct.push_back(t);
    row_of.push_back(it->second);
  }
  std::string map_key = map_key_of(key, distinct);
  std::vector<at::Tensor> outputs = find(map_key);
  if (outputs.empty()) {
    outputs = encode(distinct);
    if (outputs.empty()) throw Error("the prompt encoder returned no tensor");
    for (const at::Tensor& o : outputs)
      if (o.dim() < 1 || o.size(0) != static_cast<int64_t>(distinct.size()))
        throw Error("the prompt encoder returned " + std::to_string(o.dim() ? o.size(0) : 0) + " row(s) for " +
                    std::to_string(distinct.size()) + " text(s)");
    misses_ += static_cast<int64_t>(distinct.size());
    keep(std::move(map_key), outputs);
  }
  // New storage (index_select copies): the caller may change it (SDXL zeroes rows).
  const at::Tensor index = at::tensor(row_of, at::TensorOptions().dtype(at::kLong)).to(outputs[0].device());
  std::vector<at::Tensor> result;
  for (const at::Tensor& o : outputs) result.push_back(o.index_select(0, index));
  return result;
}

std::vector<std::vector<at::Tensor>> PromptEmbeddingCache::each(const std::vector<std::string>& texts,
                                                                const std::string& key, const EncodeOne& encode) {
  std::vector<std::vector<at::Tensor>> result;
  std::unordered_map<std::string, size_t> done;  // text -> its first place in result
  for (const std::string& t : texts) {
    if (auto it = done.find(t); it != done.end()) {
      std::vector<at::Tensor> copies;
      for (const at::Tensor& o : result[it->second]) copies.push_back(o.clone());
      result.push_back(std::move(copies));
      continue;
    }
    std::string map_key = map_key_of(key, {t});
    std::vector<at::Tensor> outputs = find(map_key);
    if (outputs.empty()) {
      outputs = encode(t);
      if (outputs.empty()) throw Error("the prompt encoder returned no tensor");
      ++misses_;
      keep(std::move(map_key), outputs);
    }
    std::vector<at::Tensor> copies;  // new storage, as rows() gives
    for (const at::Tensor& o : outputs) copies.push_back(o.clone());
    done.emplace(t, result.size());
    result.push_back(std::move(copies));
  }
  return result;
}

void PromptEmbeddingCache::begin_chunk() {
  for (Entry& e : entries_) e.pinned = false;
  pinned_ = pinned_bytes_ = 0;
  trim();
  pinning_ = true;
}

std::vector<at::Tensor> PromptEmbeddingCache::find(const std::string& map_key) {
  auto it = index_.find(map_key);
  if (it == index_.end()) return {};
  entries_.splice(entries_.begin(), entries_, it->second);  // now the most recent; iterators stay valid
  Entry& e = *it->second;
  if (pinning_) pin(e);
  ++hits_;
  std::vector<at::Tensor> outputs;
  for (const at::Tensor& o : e.outputs) outputs.push_back(o.device() == e.device ? o : o.to(e.device));
  return outputs;
}

void PromptEmbeddingCache::keep(std::string map_key, const std::vector<at::Tensor>& outputs) {
  if (capacity_ == 0 && !pinning_) return;
  Entry e{std::move(map_key), {}, outputs.front().device(), 0, false};
  for (const at::Tensor& o : outputs) {
    at::Tensor kept = o;
    if (on_host_ && !o.device().is_cpu()) kept = o.to(at::kCPU).pin_memory();
    e.bytes += static_cast<size_t>(kept.numel()) * kept.element_size();
    e.outputs.push_back(std::move(kept));
  }
  bytes_ += e.bytes;
  entries_.push_front(std::move(e));
  index_[entries_.front().key] = entries_.begin();
  if (pinning_) pin(entries_.front());
  trim();
}

void PromptEmbeddingCache::pin(Entry& e) {
  if (e.pinned) return;
  e.pinned = true;
  ++pinned_;
  pinned_bytes_ += e.bytes;
}

void PromptEmbeddingCache::trim() {
  auto it = entries_.end();
  while (it != entries_.begin() &&
         (entries_.size() - pinned_ > capacity_ || bytes_ - pinned_bytes_ > max_bytes_)) {
    --it;
    if (it->pinned) continue;
    bytes_ -= it->bytes;
    index_.erase(it->key);
    it = entries_.erase(it);
  }
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/families/prompt_embedding_cache.h"

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

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
  // '\0' ends the key (no key holds one); each text is length-prefixed, so no list of texts
  // reads as another.
  std::string map_key = key + '\0';
  for (const std::string& t : distinct) map_key += std::to_string(t.size()) + ':' + t;

  std::vector<at::Tensor> outputs;
  if (auto it = index_.find(map_key); it != index_.end()) {
    entries_.splice(entries_.begin(), entries_, it->second);  // now the most recent; iterators stay valid
    outputs = it->second->second;
    ++hits_;
  } else {
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

void PromptEmbeddingCache::keep(std::string map_key, std::vector<at::Tensor> outputs) {
  if (capacity_ == 0) return;
  entries_.emplace_front(std::move(map_key), std::move(outputs));
  index_[entries_.front().first] = entries_.begin();
  while (entries_.size() > capacity_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

}  // namespace dpinfer::pipeline

#include "dpinfer/pipeline/families/prompt_embedding_cache.h"

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

std::vector<at::Tensor> PromptEmbeddingCache::rows(const std::vector<std::string>& texts, const std::string& key,
                                                   const Encoder& encode) {
  // Where each text's row comes from: an entry (found), or the encoder's output (fresh).
  std::vector<std::string> map_keys;
  std::vector<const std::vector<at::Tensor>*> found(texts.size(), nullptr);
  std::vector<std::string> missing, missing_keys;       // distinct, in first-seen order
  std::unordered_map<std::string, size_t> missing_at;  // map key -> index in `missing`
  for (size_t i = 0; i < texts.size(); ++i) {
    // '\0' ends the key: no key holds one, so no (key, text) pair reads as another.
    map_keys.push_back(key + '\0' + texts[i]);
    if (auto it = index_.find(map_keys[i]); it != index_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);  // now the most recent; iterators stay valid
      found[i] = &it->second->second;
      ++hits_;
    } else if (missing_at.emplace(map_keys[i], missing.size()).second) {
      missing.push_back(texts[i]);
      missing_keys.push_back(map_keys[i]);
    }
  }
  std::vector<std::vector<at::Tensor>> fresh(missing.size());  // [text][output] -> [...]
  if (!missing.empty()) {
    std::vector<at::Tensor> outputs = encode(missing);
    if (outputs.empty()) throw Error("the prompt encoder returned no tensor");
    for (const at::Tensor& o : outputs)
      if (o.dim() < 1 || o.size(0) != static_cast<int64_t>(missing.size()))
        throw Error("the prompt encoder returned " + std::to_string(o.dim() ? o.size(0) : 0) + " row(s) for " +
                    std::to_string(missing.size()) + " text(s)");
    misses_ += static_cast<int64_t>(missing.size());
    for (size_t j = 0; j < missing.size(); ++j)
      for (const at::Tensor& o : outputs)
        fresh[j].push_back(o[static_cast<int64_t>(j)].clone());  // its own storage: an entry holds one row only
  }
  const size_t n_outputs = found.empty() ? 0 : (found[0] ? found[0]->size() : fresh[missing_at.at(map_keys[0])].size());
  std::vector<at::Tensor> result;
  for (size_t k = 0; k < n_outputs; ++k) {
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<at::Tensor>& row = found[i] ? *found[i] : fresh[missing_at.at(map_keys[i])];
      if (row.size() != n_outputs) throw Error("the prompt encoder's outputs changed in number under one key");
      parts.push_back(row[k]);
    }
    result.push_back(at::stack(parts));  // new storage: the caller may change it (SDXL zeroes rows)
  }
  // Kept last: dropping old entries must not free rows that `found` still points at.
  for (size_t j = 0; j < missing.size(); ++j) keep(std::move(missing_keys[j]), std::move(fresh[j]));
  return result;
}

void PromptEmbeddingCache::keep(std::string map_key, std::vector<at::Tensor> row) {
  if (capacity_ == 0) return;
  entries_.emplace_front(std::move(map_key), std::move(row));
  index_[entries_.front().first] = entries_.begin();
  while (entries_.size() > capacity_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

}  // namespace dpinfer::pipeline

#include "byte_level_bpe.h"

#include <algorithm>

#include "unicode_text.h"

namespace dpinfer::pipeline::bpe {

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> symbols = [] {
    std::array<std::string, 256> out;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      unicode::append_utf8(printable ? char32_t(b) : next++, out[size_t(b)]);
    }
    return out;
  }();
  return symbols;
}

std::vector<std::string_view> split_merge_line(std::string_view line) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n'; };
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    size_t start = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > start) parts.push_back(line.substr(start, i - start));
  }
  return parts;
}

int32_t Merges::intern(const std::string& symbol) {
  if (auto it = index_.find(symbol); it != index_.end()) return it->second;
  auto number = int32_t(symbols_.size());
  index_.emplace(symbol, number);
  symbols_.push_back(symbol);
  return number;
}

std::optional<int32_t> Merges::find(std::string_view symbol) const {
  auto it = index_.find(std::string(symbol));
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void Merges::add(const std::string& left, const std::string& right, uint32_t rank) {
  int32_t merged = intern(left + right);
  int32_t l = intern(left), r = intern(right);
  merges_[(uint64_t(uint32_t(l)) << 32) | uint32_t(r)] = Merge{rank, merged};
}

void Merges::apply(std::vector<int32_t>& word) const {
  std::vector<int32_t> next;
  while (word.size() > 1) {
    const Merge* best = nullptr;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      uint64_t key = (uint64_t(uint32_t(word[i])) << 32) | uint32_t(word[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && (best == nullptr || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = key;
      }
    }
    if (best == nullptr) break;
    auto left = int32_t(best_key >> 32), right = int32_t(best_key & 0xFFFFFFFFu);
    next.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        next.push_back(best->merged);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word.swap(next);
  }
}

bool WordCache::lookup(const std::string& piece, std::vector<int64_t>& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = map_.find(piece);
  if (it == map_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(const std::string& piece, std::vector<int64_t> ids) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (map_.size() >= kMaxWords) map_.clear();
  map_.emplace(piece, std::move(ids));
}

AddedTokenFinder::AddedTokenFinder(std::vector<std::string> contents) : contents_(std::move(contents)) {
  for (size_t i = 0; i < contents_.size(); ++i) {
    if (contents_[i].empty()) continue;
    by_length_.push_back(i);
    first_byte_[static_cast<unsigned char>(contents_[i][0])] = true;
  }
  std::stable_sort(by_length_.begin(), by_length_.end(),
                   [&](size_t a, size_t b) { return contents_[a].size() > contents_[b].size(); });
}

std::vector<AddedTokenFinder::Match> AddedTokenFinder::find(std::string_view text) const {
  std::vector<Match> out;
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const size_t* hit = nullptr;
    for (const size_t& t : by_length_) {
      if (text.compare(i, contents_[t].size(), contents_[t]) == 0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    out.push_back({i, i + contents_[*hit].size(), *hit});
    i += contents_[*hit].size();
  }
  return out;
}

void encode_piece(const std::string& piece, const std::unordered_map<std::string, int64_t>& vocab,
                  const Merges& merges, const std::vector<int64_t>& symbol_ids, bool ignore_merges,
                  const WordCache& cache, std::vector<int64_t>& out) {
  if (cache.lookup(piece, out)) return;
  std::vector<int64_t> ids;
  std::string symbols;
  if (ignore_merges) {
    for (char b : piece) symbols += byte_symbols()[static_cast<unsigned char>(b)];
  }
  if (auto it = ignore_merges ? vocab.find(symbols) : vocab.end(); it != vocab.end()) {
    ids.push_back(it->second);
  } else {
    std::vector<int32_t> word(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) word[i] = static_cast<unsigned char>(piece[i]);
    merges.apply(word);
    ids.reserve(word.size());
    for (int32_t s : word) ids.push_back(symbol_ids[size_t(s)]);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  cache.insert(piece, std::move(ids));
}

}  // namespace dpinfer::pipeline::bpe

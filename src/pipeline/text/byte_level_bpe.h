#pragma once
// The byte-level BPE that CLIP's, Qwen2's and Tekken's tokenizers share: GPT-2's byte symbols, merges by
// rank over interned symbols, a word cache, and the search for added tokens in a text.
// What differs (how text becomes pieces, merges.txt's window, CLIP's end-of-word symbols,
// how added tokens strip their neighbours) stays with each tokenizer.

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dpinfer::pipeline::bpe {

/// Ref: transformers' bytes_to_unicode (GPT-2's). Printable Latin-1 bytes stand for
/// themselves, the rest map to U+0100 upwards in byte order; each entry is UTF-8.
const std::array<std::string, 256>& byte_symbols();

/// A merges.txt line split on whitespace, as Python's str.split() does for the characters
/// byte-level symbols can hold.
std::vector<std::string_view> split_merge_line(std::string_view line);

/// The merges of a BPE vocabulary over interned symbols (a symbol is a token's text, e.g.
/// "Ġthe"). Ref: the `bpe` method of the slow GPT-2-style tokenizers.
class Merges {
 public:
  /// The number of `symbol`, interning it if new. The first 256 calls should intern the
  /// byte symbols in byte order, so that byte b is symbol b.
  int32_t intern(const std::string& symbol);
  /// The number of `symbol`, if interned.
  std::optional<int32_t> find(std::string_view symbol) const;
  /// Ranks the pair (left, right), merged into left + right. A pair given twice keeps the
  /// later rank, as `dict(zip(merges, range(n)))` does.
  void add(const std::string& left, const std::string& right, uint32_t rank);
  /// Merges `word` in place: the pair of lowest rank first, each of its occurrences left
  /// to right, until no adjacent pair has a rank.
  void apply(std::vector<int32_t>& word) const;
  /// Every interned symbol, by number.
  const std::vector<std::string>& symbols() const { return symbols_; }
  /// Distinct pairs ranked.
  size_t size() const { return merges_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };
  std::unordered_map<std::string, int32_t> index_;
  std::vector<std::string> symbols_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
};

/// A cache of a piece's ids, safe to share between threads. Past a bound it starts afresh,
/// so that it is a cache and not a leak.
class WordCache {
 public:
  /// Appends the cached ids of `piece` to `out`; false when it is not cached.
  bool lookup(const std::string& piece, std::vector<int64_t>& out) const;
  void insert(const std::string& piece, std::vector<int64_t> ids) const;

 private:
  static constexpr size_t kMaxWords = 1 << 16;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> map_;
};

/// The ids of `piece` (UTF-8 text, one pre-token) under a byte-level BPE model, appended to
/// `out`. Ref: tokenizers' BPE::tokenize: with `ignore_merges`, a piece whose byte symbols are
/// a vocabulary entry is that entry; else its bytes are merged by rank. `symbol_ids` maps
/// `merges`' symbols to ids; `cache` remembers pieces.
void encode_piece(const std::string& piece, const std::unordered_map<std::string, int64_t>& vocab,
                  const Merges& merges, const std::vector<int64_t>& symbol_ids, bool ignore_merges,
                  const WordCache& cache, std::vector<int64_t>& out);

/// Where a text holds added tokens, found as transformers' Trie.split and tokenizers'
/// leftmost-longest Aho-Corasick find them: scanning left to right, at the first position
/// where any token starts the longest one, then on after it.
class AddedTokenFinder {
 public:
  struct Match {
    size_t begin;  ///< byte offsets in the text
    size_t end;
    size_t token;  ///< index into the contents given to the constructor
  };
  AddedTokenFinder() = default;
  /// Empty contents never match.
  explicit AddedTokenFinder(std::vector<std::string> contents);
  std::vector<Match> find(std::string_view text) const;
  bool empty() const { return by_length_.empty(); }

 private:
  std::vector<std::string> contents_;
  std::vector<size_t> by_length_;  // indices into contents_, longest first
  std::array<bool, 256> first_byte_{};
};

}  // namespace dpinfer::pipeline::bpe

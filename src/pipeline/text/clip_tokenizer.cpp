// Ref: transformers/models/clip/tokenization_clip.py (the slow CLIPTokenizer),
//      transformers/tokenization_utils.py (PreTrainedTokenizer.tokenize, Trie),
//      transformers/tokenization_utils_base.py (from_pretrained's special tokens).
#include "dpinfer/pipeline/text/clip_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "byte_level_bpe.h"
#include "dpinfer/util/error.h"
#include "tokenizer_files.h"
#include "unicode_tables.h"
#include "unicode_text.h"

namespace dpinfer::pipeline {
namespace {

using bpe::AddedToken;
using bpe::describe;
using nlohmann::json;

// CLIPTokenizer reads merges.txt lines [1 : 49152 - 256 - 2 + 1].
constexpr size_t kMaxMerges = 49152 - 256 - 2;
constexpr const char* kEndOfWord = "</w>";
// bpe() answers these from its cache unsplit, whatever the config's special tokens.
constexpr std::string_view kCachedSpecials[] = {"<|startoftext|>", "<|endoftext|>"};

std::string strip_python_space(const std::string& text, bool left, bool right) {
  std::u32string cps = unicode::decode_utf8(text);
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && unicode::is_python_space(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && unicode::is_python_space(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) unicode::append_utf8(cps[i], out);
  return out;
}

bool ci_literal_char(char32_t c, char p) {
  // The regex's IGNORECASE (simple case folding) pairs each ASCII letter of its
  // literals with its other case, and 's' also with U+017F (long s).
  if (c == char32_t(p)) return true;
  if (p >= 'a' && p <= 'z') return c == char32_t(p - 32) || (p == 's' && c == 0x17F);
  return false;
}

size_t match_literal(std::u32string_view word, size_t pos, std::string_view literal) {
  if (word.size() - pos < literal.size()) return 0;
  for (size_t k = 0; k < literal.size(); ++k) {
    if (!ci_literal_char(word[pos + k], literal[k])) return 0;
  }
  return literal.size();
}

// Ref: tokenization_clip.py self.pat, matched the way regex.findall does: at each
// position the first alternative that matches wins, and a position where none
// matches (\s, or U+0345 which IGNORECASE keeps out of every class) is skipped.
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
template <typename Emit>
void split_pieces(std::u32string_view word, Emit&& emit) {
  static constexpr std::string_view kSpecials[] = {"<|startoftext|>", "<|endoftext|>"};
  static constexpr std::string_view kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  size_t i = 0;
  while (i < word.size()) {
    size_t len = 0;
    if (word[i] == '<') {
      for (std::string_view s : kSpecials) {
        if ((len = match_literal(word, i, s)) != 0) break;
      }
    } else if (word[i] == '\'') {
      for (std::string_view s : kContractions) {
        if ((len = match_literal(word, i, s)) != 0) break;
      }
    }
    if (len == 0) {
      uint8_t cls = unicode::props(word[i]) & unicode::kRegexClassMask;
      if (cls == unicode::kRegexNone) {
        ++i;
        continue;
      }
      len = 1;
      if (cls != unicode::kRegexNumber) {
        while (i + len < word.size() && (unicode::props(word[i + len]) & unicode::kRegexClassMask) == cls) ++len;
      }
    }
    emit(word.substr(i, len));
    i += len;
  }
}

// Ref: PreTrainedTokenizerBase.from_pretrained with CLIPTokenizer's defaults.
bpe::TokenizerConfig read_tokenizer_config(const std::string& dir, int& model_max_length) {
  bpe::TokenizerConfig out = bpe::read_tokenizer_config(
      dir, {{"bos_token", "<|startoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"},
            {"pad_token", "<|endoftext|>"}});
  for (const char* side : {"padding_side", "truncation_side"}) {
    auto it = out.config.find(side);
    if (it != out.config.end() && !it->is_null() && *it != "right") {
      throw Error("tokenizer file " + out.path + ": " + side + " " + describe(*it) +
                  " is not supported; only \"right\" (the CLIP default) is");
    }
  }
  model_max_length = bpe::parse_model_max_length(out.config, out.path, CLIPTokenizer::kDefaultModelMaxLength, 2);
  return out;
}

}  // namespace

struct CLIPTokenizer::Impl {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<AddedToken> added;  // in the order they were added
  std::unordered_map<std::string, int64_t> added_ids;
  std::unordered_map<std::string, size_t> added_index;  // content -> index in `added`
  bpe::AddedTokenFinder finder;                         // over `added`

  // BPE works on interned symbols: 0..255 the byte symbols, 256..511 the same with
  // </w>, then every other string the merges mention.
  bpe::Merges merges;
  std::vector<int64_t> symbol_token_ids;

  int64_t bos = 0, eos = 0, unk = 0, pad = 0;
  std::string bos_token, eos_token, unk_token, pad_token;
  int max_length = kDefaultModelMaxLength;

  bpe::WordCache cache;

  int64_t token_id(const std::string& token) const {
    if (auto it = added_ids.find(token); it != added_ids.end()) return it->second;
    if (auto it = vocab.find(token); it != vocab.end()) return it->second;
    return unk;
  }

  // Ref: CLIPTokenizer.bpe, then _convert_token_to_id_with_added_voc.
  void bpe(const std::string& piece, std::vector<int64_t>& out) const {
    for (std::string_view special : kCachedSpecials) {
      if (piece == special) {
        out.push_back(token_id(piece));
        return;
      }
    }
    if (cache.lookup(piece, out)) return;
    std::vector<int32_t> word(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      auto b = static_cast<unsigned char>(piece[i]);
      word[i] = i + 1 == piece.size() ? 256 + b : b;
    }
    merges.apply(word);
    std::vector<int64_t> ids;
    ids.reserve(word.size());
    for (int32_t s : word) ids.push_back(symbol_token_ids[size_t(s)]);
    out.insert(out.end(), ids.begin(), ids.end());
    cache.insert(piece, std::move(ids));
  }

  // Ref: CLIPTokenizer._tokenize without ftfy.
  void tokenize_chunk(std::string_view chunk, std::vector<int64_t>& out) const {
    std::string piece;
    for (const std::u32string& word : unicode::basic_tokenize(unicode::decode_utf8(chunk))) {
      split_pieces(word, [&](std::u32string_view p) {
        piece.clear();
        for (char32_t cp : p) unicode::append_utf8(cp, piece);
        bpe(piece, out);
      });
    }
  }

  // Ref: PreTrainedTokenizer.tokenize: Trie.split on the added tokens (leftmost,
  // longest first), their lstrip/rstrip/single_word, then _tokenize on the rest.
  std::vector<int64_t> tokenize(std::string_view text) const {
    std::vector<std::string> chunks;
    size_t start = 0;
    for (const bpe::AddedTokenFinder::Match& m : finder.find(text)) {
      if (m.begin > start) chunks.emplace_back(text.substr(start, m.begin - start));
      chunks.push_back(added[m.token].content);
      start = m.end;
    }
    if (start < text.size()) chunks.emplace_back(text.substr(start));

    for (size_t k = 0; k < chunks.size(); ++k) {
      auto it = added_index.find(chunks[k]);
      if (it == added_index.end()) continue;
      const AddedToken& t = added[it->second];
      // The single_word checks look at the neighbours as they were before stripping.
      const std::string left = k > 0 ? chunks[k - 1] : std::string();
      const std::string right = k + 1 < chunks.size() ? chunks[k + 1] : std::string();
      if (t.rstrip && !right.empty()) chunks[k + 1] = strip_python_space(right, true, false);
      if (t.lstrip && !left.empty()) chunks[k - 1] = strip_python_space(left, false, true);
      if (t.single_word && !left.empty() && left.back() != ' ') {
        chunks[k - 1] += chunks[k];
        chunks[k].clear();
      } else if (t.single_word && !right.empty() && right.front() != ' ') {
        chunks[k + 1] = chunks[k] + chunks[k + 1];
        chunks[k].clear();
      }
    }

    std::vector<int64_t> ids;
    for (const std::string& chunk : chunks) {
      if (chunk.empty()) continue;
      if (auto it = added_ids.find(chunk); it != added_ids.end()) {
        ids.push_back(it->second);
      } else {
        tokenize_chunk(chunk, ids);
      }
    }
    return ids;
  }

  // Fills `merges`. Ref: CLIPTokenizer.__init__: read().strip().split("\n")[1 : 48895],
  // split() on whitespace; a repeated pair keeps its last rank, as dict(zip(...)) does.
  void load_merges(const std::string& path) {
    const std::string text = bpe::read_file(path);
    std::string_view all(text);
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    while (!all.empty() && is_space(all.front())) all.remove_prefix(1);
    while (!all.empty() && is_space(all.back())) all.remove_suffix(1);

    for (const std::string& b : bpe::byte_symbols()) merges.intern(b);
    for (const std::string& b : bpe::byte_symbols()) merges.intern(b + kEndOfWord);
    size_t line_no = 0;
    while (!all.empty() && line_no <= kMaxMerges) {
      size_t nl = all.find('\n');
      std::string_view line = all.substr(0, nl);
      all.remove_prefix(nl == std::string_view::npos ? all.size() : nl + 1);
      if (line_no++ == 0) continue;
      std::vector<std::string_view> parts = bpe::split_merge_line(line);
      if (parts.size() != 2) continue;  // keeps its rank but can never match a pair
      merges.add(std::string(parts[0]), std::string(parts[1]), uint32_t(line_no - 2));
    }
  }

  // Ref: PreTrainedTokenizer.__init__: the decoder's tokens keep their ids; each
  // special token not among them takes its vocabulary id, or else the next new one.
  void add_tokens(const bpe::TokenizerConfig& config, const std::string& dir) {
    for (auto& [id, token] : bpe::resolve_added_tokens(config, vocab)) {
      added_ids[token.content] = id;
      added_index[token.content] = added.size();
      added.push_back(token);
    }
    std::vector<std::string> contents;
    for (const AddedToken& t : added) contents.push_back(t.content);
    finder = bpe::AddedTokenFinder(std::move(contents));

    // Ref: convert_tokens_to_ids: added tokens, then the vocabulary, then unk.
    auto special = [&](const char* key) -> const std::string& {
      if (const AddedToken* t = config.find(key)) return t->content;
      throw Error("tokenizer folder " + dir + " defines no " + key +
                  "; set it in tokenizer_config.json or special_tokens_map.json");
    };
    unk_token = special("unk_token");
    if (added_ids.count(unk_token) == 0) {
      throw Error("tokenizer folder " + dir + ": unk_token " + describe(json(unk_token)) + " is empty; set a real token");
    }
    unk = added_ids.at(unk_token);
    bos_token = special("bos_token");
    eos_token = special("eos_token");
    pad_token = special("pad_token");
    bos = token_id(bos_token);
    eos = token_id(eos_token);
    pad = token_id(pad_token);
  }
};

CLIPTokenizer::CLIPTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

CLIPTokenizer CLIPTokenizer::from_dir(const std::string& tokenizer_dir) {
  const std::string dir = tokenizer_dir.empty() || tokenizer_dir.back() == '/' ? tokenizer_dir : tokenizer_dir + "/";
  auto impl = std::make_shared<Impl>();
  impl->vocab = bpe::read_vocab(dir + "vocab.json");
  impl->load_merges(dir + "merges.txt");
  bpe::TokenizerConfig config = read_tokenizer_config(dir, impl->max_length);
  impl->add_tokens(config, dir);
  impl->symbol_token_ids.reserve(impl->merges.symbols().size());
  for (const std::string& symbol : impl->merges.symbols()) impl->symbol_token_ids.push_back(impl->token_id(symbol));
  return CLIPTokenizer(std::move(impl));
}

std::vector<int64_t> CLIPTokenizer::tokenize(const std::string& text) const {
  bpe::check_utf8(text);
  return impl_->tokenize(text);
}

Encoding CLIPTokenizer::encode_unpadded(const std::string& prompt, int max_length) const {
  if (max_length < 2) {
    throw Error("tokenizer max_length must be at least 2 (room for bos and eos), got " + std::to_string(max_length));
  }
  std::vector<int64_t> tokens = tokenize(prompt);
  const size_t room = size_t(max_length) - 2;
  Encoding out;
  out.dropped_tokens = tokens.size() > room ? int64_t(tokens.size() - room) : 0;
  tokens.resize(std::min(tokens.size(), room));
  out.ids.reserve(size_t(max_length));
  out.ids.push_back(impl_->bos);
  out.ids.insert(out.ids.end(), tokens.begin(), tokens.end());
  out.ids.push_back(impl_->eos);
  out.attention_mask.assign(out.ids.size(), 1);
  return out;
}

Encoding CLIPTokenizer::encode(const std::string& prompt, int max_length) const {
  Encoding out = encode_unpadded(prompt, max_length);
  out.ids.resize(size_t(max_length), impl_->pad);
  out.attention_mask.resize(size_t(max_length), 0);
  return out;
}

int64_t CLIPTokenizer::bos_id() const { return impl_->bos; }
int64_t CLIPTokenizer::eos_id() const { return impl_->eos; }
int64_t CLIPTokenizer::unk_id() const { return impl_->unk; }
int64_t CLIPTokenizer::pad_id() const { return impl_->pad; }
const std::string& CLIPTokenizer::bos_token() const { return impl_->bos_token; }
const std::string& CLIPTokenizer::eos_token() const { return impl_->eos_token; }
const std::string& CLIPTokenizer::unk_token() const { return impl_->unk_token; }
const std::string& CLIPTokenizer::pad_token() const { return impl_->pad_token; }
int CLIPTokenizer::model_max_length() const { return impl_->max_length; }
size_t CLIPTokenizer::vocab_size() const { return impl_->vocab.size(); }

std::vector<SpecialToken> CLIPTokenizer::special_tokens() const {
  return {{"bos", bos_token(), bos_id()}, {"eos", eos_token(), eos_id()}, {"pad", pad_token(), pad_id()},
          {"unk", unk_token(), unk_id()}};
}

}  // namespace dpinfer::pipeline

// Ref: transformers/models/clip/tokenization_clip.py (the slow CLIPTokenizer),
//      transformers/tokenization_utils.py (PreTrainedTokenizer.tokenize, Trie),
//      transformers/tokenization_utils_base.py (from_pretrained's special tokens).
#include "dpinfer/pipeline/text/clip_tokenizer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include <sys/stat.h>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"
#include "unicode_tables.h"
#include "unicode_text.h"

namespace dpinfer::pipeline {
namespace {

using nlohmann::json;

// CLIPTokenizer reads merges.txt lines [1 : 49152 - 256 - 2 + 1].
constexpr size_t kMaxMerges = 49152 - 256 - 2;
constexpr const char* kEndOfWord = "</w>";
// bpe() answers these from its cache unsplit, whatever the config's special tokens.
constexpr std::string_view kCachedSpecials[] = {"<|startoftext|>", "<|endoftext|>"};
// The word cache is a cache, not a leak: past this many words it starts afresh.
constexpr size_t kMaxCachedWords = 1 << 16;
constexpr int64_t kMaxSaneModelMaxLength = int64_t(1) << 31;

// PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES, in its order (the order new ids go in).
constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

struct AddedToken {
  std::string content;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot open tokenizer file " + path + ": " + std::strerror(errno) +
                "; the tokenizer folder needs vocab.json and merges.txt as diffusers saves them");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read tokenizer file " + path + ": " + std::strerror(errno));
  return ss.str();
}

std::string describe(const json& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

json parse_json(const std::string& path) {
  const std::string text = read_file(path);  // a missing file says what the folder needs
  try {
    return io::parse_json_text(text);
  } catch (const io::JsonSyntaxError& e) {
    throw Error(quote(path) + " is not valid json (" + e.what() + "); re-download the tokenizer folder");
  }
}

// POSIX stat rather than std::filesystem: the PyPI libtorch.so exports its own
// std::filesystem symbols, and calls can bind to them.
std::optional<json> parse_json_if_present(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  return parse_json(path);
}

// A special token as tokenizer_config.json / special_tokens_map.json write it: a
// string, an AddedToken object ({"content": ..., "lstrip": ...}), or null (none).
std::optional<AddedToken> parse_added_token(const json& value, const std::string& path, const std::string& field) {
  if (value.is_null()) return std::nullopt;
  AddedToken token;
  if (value.is_string()) {
    token.content = value.get<std::string>();
    return token;
  }
  auto it = value.is_object() ? value.find("content") : value.end();
  if (!value.is_object() || it == value.end() || !it->is_string()) {
    throw Error("tokenizer file " + path + ": " + field + " must be a string or an object with a string \"content\", got " +
                describe(value));
  }
  token.content = it->get<std::string>();
  auto flag = [&](const char* name) {
    auto f = value.find(name);
    if (f == value.end() || f->is_null()) return false;
    if (!f->is_boolean()) {
      throw Error("tokenizer file " + path + ": " + field + "." + name + " must be true or false, got " + describe(*f));
    }
    return f->get<bool>();
  };
  token.lstrip = flag("lstrip");
  token.rstrip = flag("rstrip");
  token.single_word = flag("single_word");
  return token;
}

int parse_model_max_length(const json& config, const std::string& path) {
  auto it = config.find("model_max_length");
  if (it == config.end() || it->is_null()) return CLIPTokenizer::kDefaultModelMaxLength;
  const json& v = *it;
  double value;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t(kMaxSaneModelMaxLength)) {
      return CLIPTokenizer::kDefaultModelMaxLength;
    }
    value = double(v.get<int64_t>());
  } else if (v.is_number_float()) {
    value = v.get<double>();  // int(1e30) does not fit 64 bits and parses as a float
  } else {
    throw Error("tokenizer file " + path + ": model_max_length must be a number, got " + describe(v));
  }
  if (value >= double(kMaxSaneModelMaxLength)) return CLIPTokenizer::kDefaultModelMaxLength;
  if (value != double(int64_t(value)) || value < 2) {
    throw Error("tokenizer file " + path + ": model_max_length must be an integer of at least 2, got " + describe(v));
  }
  return int(value);
}

// Python's str.isspace(): the separators, and the control characters
// BasicTokenizer drops that Python still calls whitespace.
bool is_python_space(char32_t cp) {
  return (unicode::props(cp) & unicode::kSeparator) || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1F) ||
         cp == 0x85;
}

std::string strip_python_space(const std::string& text, bool left, bool right) {
  std::u32string cps = unicode::decode_utf8(text);
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && is_python_space(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && is_python_space(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) unicode::append_utf8(cps[i], out);
  return out;
}

// Ref: tokenization_clip.py bytes_to_unicode. Printable Latin-1 bytes stand for
// themselves, the rest map to U+0100 upwards in byte order.
std::array<std::string, 256> byte_symbols() {
  std::array<std::string, 256> out;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    unicode::append_utf8(printable ? char32_t(b) : next++, out[b]);
  }
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

std::vector<std::string_view> split_merge_line(std::string_view line) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    size_t start = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > start) parts.push_back(line.substr(start, i - start));
  }
  return parts;
}

// What tokenizer_config.json and special_tokens_map.json say, resolved as
// transformers' from_pretrained does.
struct TokenizerConfig {
  std::vector<std::pair<std::string, std::optional<AddedToken>>> by_key;  // kSpecialTokenKeys order
  std::vector<AddedToken> additional;
  std::vector<std::pair<int64_t, AddedToken>> decoder;  // added_tokens_decoder
  int model_max_length = CLIPTokenizer::kDefaultModelMaxLength;

  const AddedToken* find(const std::string& key) const {
    for (const auto& [k, v] : by_key) {
      if (k == key && v) return &*v;
    }
    return nullptr;
  }
  void set(const std::string& key, std::optional<AddedToken> token) {
    for (auto& [k, v] : by_key) {
      if (k == key) v = std::move(token);
    }
  }
  // In the order PreTrainedTokenizer.__init__ adds them.
  std::vector<AddedToken> special_tokens() const {
    std::vector<AddedToken> out;
    for (const auto& [k, v] : by_key) {
      if (v) out.push_back(*v);
    }
    out.insert(out.end(), additional.begin(), additional.end());
    return out;
  }

  void read_special_tokens(const json& source, const std::string& path) {
    if (!source.is_object()) throw Error("tokenizer file " + path + ": expected a json object, got " + describe(source));
    for (const char* key : kSpecialTokenKeys) {
      if (auto it = source.find(key); it != source.end()) set(key, parse_added_token(*it, path, key));
    }
    auto it = source.find("additional_special_tokens");
    if (it == source.end() || it->is_null()) return;
    if (!it->is_array()) {
      throw Error("tokenizer file " + path + ": additional_special_tokens must be a list, got " + describe(*it));
    }
    for (const json& v : *it) {
      std::optional<AddedToken> t = parse_added_token(v, path, "additional_special_tokens");
      if (t && std::none_of(additional.begin(), additional.end(),
                            [&](const AddedToken& a) { return a.content == t->content; })) {
        additional.push_back(*t);
      }
    }
  }

  void read_decoder(const json& decoder_json, const std::string& path) {
    if (!decoder_json.is_object()) {
      throw Error("tokenizer file " + path + ": added_tokens_decoder must be an object of id -> token, got " +
                  describe(decoder_json));
    }
    for (auto e = decoder_json.begin(); e != decoder_json.end(); ++e) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(e.key(), &used);
        if (used != e.key().size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0) {
        throw Error("tokenizer file " + path + ": added_tokens_decoder key " + json(e.key()).dump() +
                    " must be a token id");
      }
      if (auto t = parse_added_token(*e, path, "added_tokens_decoder." + e.key())) decoder.emplace_back(id, *t);
    }
  }
};

// Ref: PreTrainedTokenizerBase.from_pretrained: CLIPTokenizer's defaults, then
// tokenizer_config.json, then special_tokens_map.json unless the config has an
// added_tokens_decoder (then the map is not read at all).
TokenizerConfig read_tokenizer_config(const std::string& dir) {
  const std::string config_path = dir + "tokenizer_config.json";
  const std::string map_path = dir + "special_tokens_map.json";
  json config = parse_json_if_present(config_path).value_or(json::object());
  if (!config.is_object()) {
    throw Error("tokenizer file " + config_path + ": expected a json object, got " + describe(config));
  }
  for (const char* side : {"padding_side", "truncation_side"}) {
    auto it = config.find(side);
    if (it != config.end() && !it->is_null() && *it != "right") {
      throw Error("tokenizer file " + config_path + ": " + side + " " + describe(*it) +
                  " is not supported; only \"right\" (the CLIP default) is");
    }
  }
  TokenizerConfig out;
  out.model_max_length = parse_model_max_length(config, config_path);
  for (const char* key : kSpecialTokenKeys) out.by_key.emplace_back(key, std::nullopt);
  out.set("bos_token", AddedToken{"<|startoftext|>"});
  out.set("eos_token", AddedToken{"<|endoftext|>"});
  out.set("unk_token", AddedToken{"<|endoftext|>"});
  out.set("pad_token", AddedToken{"<|endoftext|>"});
  out.read_special_tokens(config, config_path);
  if (auto it = config.find("added_tokens_decoder"); it != config.end() && !it->is_null()) {
    out.read_decoder(*it, config_path);
  } else if (std::optional<json> map = parse_json_if_present(map_path)) {
    out.read_special_tokens(*map, map_path);
  }
  return out;
}

}  // namespace

struct CLIPTokenizer::Impl {
  struct Merge {
    uint32_t rank;
    int32_t merged;  // symbol
  };

  std::unordered_map<std::string, int64_t> vocab;
  std::vector<AddedToken> added;  // longest content first, for splitting text on them
  std::unordered_map<std::string, int64_t> added_ids;
  std::unordered_map<std::string, size_t> added_index;  // content -> index in `added`

  // BPE works on interned symbols: 0..255 the byte symbols, 256..511 the same with
  // </w>, then every other string the merges mention.
  std::vector<int64_t> symbol_token_ids;
  std::unordered_map<uint64_t, Merge> merges;  // (left << 32 | right) -> merge

  int64_t bos = 0, eos = 0, unk = 0, pad = 0;
  std::string bos_token, eos_token, unk_token, pad_token;
  int max_length = kDefaultModelMaxLength;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache;

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
    {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (auto it = cache.find(piece); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> word(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      auto b = static_cast<unsigned char>(piece[i]);
      word[i] = i + 1 == piece.size() ? 256 + b : b;
    }
    std::vector<int32_t> next;
    while (word.size() > 1) {
      const Merge* best = nullptr;
      uint64_t best_key = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        uint64_t key = (uint64_t(uint32_t(word[i])) << 32) | uint32_t(word[i + 1]);
        auto it = merges.find(key);
        if (it != merges.end() && (best == nullptr || it->second.rank < best->rank)) {
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
    std::vector<int64_t> ids;
    ids.reserve(word.size());
    for (int32_t s : word) ids.push_back(symbol_token_ids[size_t(s)]);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() >= kMaxCachedWords) cache.clear();
    cache.emplace(piece, std::move(ids));
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

  bool is_added(const std::string& text) const { return added_index.count(text) != 0; }

  // Ref: PreTrainedTokenizer.tokenize: Trie.split on the added tokens (leftmost,
  // longest first), their lstrip/rstrip/single_word, then _tokenize on the rest.
  std::vector<int64_t> tokenize(std::string_view text) const {
    std::vector<std::string> chunks;
    size_t start = 0, i = 0;
    while (i < text.size()) {
      const AddedToken* hit = nullptr;
      for (const AddedToken& t : added) {
        if (text.compare(i, t.content.size(), t.content) == 0) {
          hit = &t;
          break;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      if (i > start) chunks.emplace_back(text.substr(start, i - start));
      chunks.push_back(hit->content);
      i += hit->content.size();
      start = i;
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

  void load_vocab(const std::string& path) {
    json doc = parse_json(path);
    if (!doc.is_object()) throw Error("tokenizer file " + path + ": expected an object of token -> id, got " + describe(doc));
    vocab.reserve(doc.size());
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (!it->is_number_integer()) {
        throw Error("tokenizer file " + path + ": the id of token " + json(it.key()).dump() +
                    " must be an integer, got " + describe(*it));
      }
      vocab[it.key()] = it->get<int64_t>();
    }
  }

  // Fills `merges`; returns the interned symbols' strings.
  // Ref: CLIPTokenizer.__init__: read().strip().split("\n")[1 : 48895], split() on
  // whitespace; a repeated pair keeps its last rank, as dict(zip(...)) does.
  std::vector<std::string> load_merges(const std::string& path) {
    const std::string text = read_file(path);
    std::string_view all(text);
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    while (!all.empty() && is_space(all.front())) all.remove_prefix(1);
    while (!all.empty() && is_space(all.back())) all.remove_suffix(1);

    std::unordered_map<std::string, int32_t> index;
    std::vector<std::string> symbols;
    auto intern = [&](std::string s) {
      auto [it, inserted] = index.emplace(s, int32_t(symbols.size()));
      if (inserted) symbols.push_back(std::move(s));
      return it->second;
    };
    const std::array<std::string, 256> bytes = byte_symbols();
    for (const std::string& b : bytes) intern(b);
    for (const std::string& b : bytes) intern(b + kEndOfWord);

    size_t line_no = 0;
    while (!all.empty() && line_no <= kMaxMerges) {
      size_t nl = all.find('\n');
      std::string_view line = all.substr(0, nl);
      all.remove_prefix(nl == std::string_view::npos ? all.size() : nl + 1);
      if (line_no++ == 0) continue;
      std::vector<std::string_view> parts = split_merge_line(line);
      if (parts.size() != 2) continue;  // keeps its rank but can never match a pair
      std::string left(parts[0]), right(parts[1]);
      int32_t merged = intern(left + right);
      int32_t l = intern(left), r = intern(right);
      merges[(uint64_t(uint32_t(l)) << 32) | uint32_t(r)] = Merge{uint32_t(line_no - 2), merged};
    }
    return symbols;
  }

  // Ref: PreTrainedTokenizer.__init__: the decoder's tokens keep their ids; each
  // special token not among them takes its vocabulary id, or else the next new one.
  void add_tokens(const TokenizerConfig& config, const std::string& dir) {
    std::vector<std::pair<int64_t, AddedToken>> all = config.decoder;
    auto known = [&](const std::string& content) {
      return std::any_of(all.begin(), all.end(), [&](const auto& a) { return a.second.content == content; });
    };
    for (const AddedToken& t : config.special_tokens()) {
      if (t.content.empty() || known(t.content)) continue;
      int64_t id;
      if (auto v = vocab.find(t.content); v != vocab.end()) {
        id = v->second;
      } else {
        size_t outside =
            std::count_if(all.begin(), all.end(), [&](const auto& a) { return vocab.count(a.second.content) == 0; });
        id = int64_t(vocab.size() + outside);
      }
      all.emplace_back(id, t);
    }
    for (auto& [id, token] : all) {
      if (token.content.empty()) continue;
      added_ids[token.content] = id;
      added.push_back(token);
    }
    std::stable_sort(added.begin(), added.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    for (size_t i = 0; i < added.size(); ++i) added_index[added[i].content] = i;

    // Ref: convert_tokens_to_ids: added tokens, then the vocabulary, then unk.
    auto special = [&](const char* key) -> const std::string& {
      if (const AddedToken* t = config.find(key)) return t->content;
      throw Error("tokenizer folder " + dir + " defines no " + key +
                  "; set it in tokenizer_config.json or special_tokens_map.json");
    };
    unk_token = special("unk_token");
    if (added_ids.count(unk_token) == 0) {
      throw Error("tokenizer folder " + dir + ": unk_token " + json(unk_token).dump() + " is empty; set a real token");
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
  impl->load_vocab(dir + "vocab.json");
  std::vector<std::string> symbols = impl->load_merges(dir + "merges.txt");
  TokenizerConfig config = read_tokenizer_config(dir);
  impl->max_length = config.model_max_length;
  impl->add_tokens(config, dir);
  impl->symbol_token_ids.reserve(symbols.size());
  for (const std::string& symbol : symbols) impl->symbol_token_ids.push_back(impl->token_id(symbol));
  return CLIPTokenizer(std::move(impl));
}

std::vector<int64_t> CLIPTokenizer::tokenize(const std::string& text) const {
  size_t bad = io::find_invalid_utf8(text);
  if (bad != std::string::npos) {
    static const char* kHex = "0123456789abcdef";
    auto byte = static_cast<unsigned char>(text[bad]);
    throw Error("prompt is not valid utf-8 at byte " + std::to_string(bad) + " (0x" + kHex[byte >> 4] + kHex[byte & 15] +
                "); pass prompts as utf-8 text");
  }
  return impl_->tokenize(text);
}

Encoding CLIPTokenizer::encode(const std::string& prompt, int max_length) const {
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

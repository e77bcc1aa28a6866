// Ref: transformers/integrations/mistral.py (MistralConverter, convert_tekken_tokenizer),
//      transformers/tokenization_utils_base.py (_patch_mistral_regex: Tekken's pattern),
//      tokenizers/src/tokenizer/added_vocabulary.rs, tokenizers/src/models/bpe/model.rs,
//      mistral_common/tokens/tokenizers/tekken.py.
#include "dpinfer/pipeline/text/tekken_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "byte_level_bpe.h"
#include "dpinfer/util/error.h"
#include "pretokenize_patterns.h"
#include "tekken_unicode_tables.h"
#include "tokenizer_files.h"
#include "unicode_text.h"

namespace dpinfer::pipeline {
namespace {

using bpe::AddedToken;
using bpe::describe;
using nlohmann::json;

// mistral_common's tekken.json "pattern" (tekken_240911.json's).
constexpr std::string_view kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// MistralConverter's default pattern (Llama 3's), which convert_tekken_tokenizer writes.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekkenFilesHint =
    "a Mistral (Tekken) tokenizer folder needs tokenizer.json, as transformers' Mistral conversion writes it";
constexpr size_t kNoMatch = std::string_view::npos;

uint8_t tekken_bits(char32_t c) {
  using unicode::kTekkenClassRunCount;
  using unicode::kTekkenClassRuns;
  const auto* end = kTekkenClassRuns + kTekkenClassRunCount;
  const auto* it = std::upper_bound(kTekkenClassRuns, end, uint32_t(c),
                                    [](uint32_t cp, const unicode::TekkenClassRun& r) { return cp < r.first; });
  return (it - 1)->bits;
}

// Tekken's pattern over a text whose class bits are `b`, matched as Oniguruma does: the first
// alternative that matches wins, each quantifier greedy with backtracking.
class TekkenMatcher {
 public:
  TekkenMatcher(std::u32string_view t, const std::vector<uint8_t>& b) : t_(t), b_(b), n_(t.size()) {}

  // The length of the match at `i` (never 0: every character is in one of its classes).
  size_t match(size_t i) const {
    const bool prefix = !is_newline(i) && !has(i, unicode::kTekkenLetter | unicode::kTekkenNumber);
    // [^\r\n\p{L}\p{N}]?[U]*[W]+, the optional character taken first.
    if (size_t e = prefix ? upper_then_lower(i + 1) : kNoMatch; e != kNoMatch) return e - i;
    if (size_t e = upper_then_lower(i); e != kNoMatch) return e - i;
    // [^\r\n\p{L}\p{N}]?[U]+[W]*
    if (size_t e = prefix ? uppers_then_lowers(i + 1) : kNoMatch; e != kNoMatch) return e - i;
    if (size_t e = uppers_then_lowers(i); e != kNoMatch) return e - i;
    // \p{N}
    if (has(i, unicode::kTekkenNumber)) return 1;
    // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
    const size_t others = other(i) ? i : (t_[i] == ' ' && other(i + 1)) ? i + 1 : kNoMatch;
    if (others != kNoMatch) {
      size_t j = others + 1;
      while (other(j)) ++j;
      while (j < n_ && (is_newline(j) || t_[j] == '/')) ++j;
      return j - i;
    }
    // Only whitespace is left. \s*[\r\n]+ ends after the run's last \r or \n.
    size_t end = i + 1;
    while (end < n_ && has(end, unicode::kTekkenSpace)) ++end;
    for (size_t k = end; k > i; --k) {
      if (is_newline(k - 1)) return k - i;
    }
    // \s+(?!\S), else \s+: the run, less its last character when a non-space follows it.
    if (end < n_ && end - i >= 2) return end - 1 - i;
    return end - i;
  }

 private:
  bool has(size_t k, uint8_t bits) const { return k < n_ && (b_[k] & bits) != 0; }
  bool is_newline(size_t k) const { return k < n_ && (t_[k] == '\r' || t_[k] == '\n'); }
  bool other(size_t k) const {
    return k < n_ && !has(k, unicode::kTekkenSpace | unicode::kTekkenLetter | unicode::kTekkenNumber);
  }
  size_t lowers_from(size_t k) const {
    while (has(k, unicode::kTekkenLower)) ++k;
    return k;
  }
  // [U]*[W]+ from `s`: U* takes its longest run, then gives back until W+ matches.
  size_t upper_then_lower(size_t s) const {
    if (s >= n_) return kNoMatch;
    size_t e = s;
    while (has(e, unicode::kTekkenUpper)) ++e;
    for (size_t k = e + 1; k > s; --k) {
      if (has(k - 1, unicode::kTekkenLower)) return lowers_from(k);
    }
    return kNoMatch;
  }
  // [U]+[W]* from `s`.
  size_t uppers_then_lowers(size_t s) const {
    if (!has(s, unicode::kTekkenUpper)) return kNoMatch;
    size_t e = s + 1;
    while (has(e, unicode::kTekkenUpper)) ++e;
    return lowers_from(e);
  }

  std::u32string_view t_;
  const std::vector<uint8_t>& b_;
  size_t n_;
};

struct Piece {
  int64_t token;  // index into the added tokens, or -1 for text
  size_t begin, end;
};

}  // namespace

struct TekkenTokenizer::Impl {
  std::unordered_map<std::string, int64_t> vocab;
  bpe::Merges merges;               // 0..255 the byte symbols in byte order
  std::vector<int64_t> symbol_ids;  // symbol -> id
  bool ignore_merges = false;
  bool tekken = true;               // Tekken's pattern, else Llama 3's

  std::vector<AddedToken> added;
  std::vector<int64_t> added_ids;
  std::unordered_map<std::string, int64_t> added_by_content;
  bpe::AddedTokenFinder raw_finder;  // normalized=false tokens, first
  std::vector<size_t> raw_index;
  bpe::AddedTokenFinder normalized_finder;  // the others, in the text between (no normalizer)
  std::vector<size_t> normalized_index;

  bpe::SpecialTokenIds special;
  std::string dir;
  int max_length = kNoModelMaxLength;
  bool pad_left = false;
  bool truncate_left = false;
  bpe::WordCache cache;

  void tokenize_text(std::string_view text, std::vector<int64_t>& out) const {
    const std::u32string cps = unicode::decode_utf8(text);
    std::vector<uint8_t> bits;
    if (tekken) {
      bits.resize(cps.size());
      for (size_t k = 0; k < cps.size(); ++k) bits[k] = tekken_bits(cps[k]);
    }
    const TekkenMatcher matcher(cps, bits);
    std::string piece;
    for (size_t i = 0; i < cps.size();) {
      const size_t len = tekken ? matcher.match(i) : unicode::match_gpt4_style(cps, i, 3);
      piece.clear();
      for (size_t k = i; k < i + len; ++k) unicode::append_utf8(cps[k], piece);
      bpe::encode_piece(piece, vocab, merges, symbol_ids, ignore_merges, cache, out);
      i += len;
    }
  }

  static std::vector<Piece> split(std::string_view text, const bpe::AddedTokenFinder& finder,
                                  const std::vector<size_t>& index) {
    std::vector<Piece> out;
    size_t at = 0;
    for (const bpe::AddedTokenFinder::Match& m : finder.find(text)) {
      if (at < m.begin) out.push_back({-1, at, m.begin});
      out.push_back({int64_t(index[m.token]), m.begin, m.end});
      at = m.end;
    }
    if (at < text.size()) out.push_back({-1, at, text.size()});
    return out;
  }

  // Ref: AddedVocabulary::extract_and_normalize (no normalizer), the pre-tokenizer, the model.
  std::vector<int64_t> tokenize(std::string_view text) const {
    std::vector<int64_t> ids;
    for (const Piece& raw : split(text, raw_finder, raw_index)) {
      if (raw.token >= 0) {
        ids.push_back(added_ids[size_t(raw.token)]);
        continue;
      }
      const std::string_view between = text.substr(raw.begin, raw.end - raw.begin);
      for (const Piece& p : split(between, normalized_finder, normalized_index)) {
        if (p.token >= 0) {
          ids.push_back(added_ids[size_t(p.token)]);
        } else {
          tokenize_text(between.substr(p.begin, p.end - p.begin), ids);
        }
      }
    }
    return ids;
  }

  // tokenizer.json: the model, no normalizer, the pre-tokenizer; the added tokens to `extra`,
  // the padding and truncation sections to `padding` and `truncation`.
  void load_tokenizer_json(const std::string& path, std::vector<std::pair<int64_t, AddedToken>>& extra,
                           json& padding, json& truncation) {
    const json doc = bpe::parse_json(path);
    bpe::JsonBpeModel model = bpe::read_json_bpe_model(doc, path, "Tekken");
    vocab = std::move(model.vocab);
    ignore_merges = model.ignore_merges;
    for (const std::string& b : bpe::byte_symbols()) merges.intern(b);
    for (size_t i = 0; i < model.merges.size(); ++i) merges.add(model.merges[i].first, model.merges[i].second, uint32_t(i));

    auto bad = [&](const std::string& field, const std::string& what) {
      return Error("tokenizer file " + path + ": " + field + " " + what);
    };
    const json normalizer = doc.value("normalizer", json());
    if (!normalizer.is_null()) {
      throw bad("normalizer", describe(normalizer) + " is not supported; Tekken's conversion has none (null)");
    }
    const json pre = doc.value("pre_tokenizer", json());
    const json steps = pre.is_object() && pre.value("type", "") == "Sequence" ? pre.value("pretokenizers", json()) : json();
    std::string pattern;
    bool ok = steps.is_array() && steps.size() == 2;
    if (ok) {
      const json& s = steps[0];
      const json& bytes = steps[1];
      ok = s.is_object() && s.value("type", "") == "Split" && s.contains("pattern") && s["pattern"].is_object() &&
           s["pattern"].value("Regex", json()).is_string() && s.value("behavior", "") == "Isolated" &&
           s.value("invert", true) == false && bytes.is_object() && bytes.value("type", "") == "ByteLevel" &&
           bytes.value("add_prefix_space", true) == false && bytes.value("use_regex", true) == false;
      if (ok) pattern = s["pattern"]["Regex"].get<std::string>();
    }
    if (!ok) {
      throw bad("pre_tokenizer", "is not a Mistral conversion's (Split on a regex, isolated, then ByteLevel without a "
                                 "prefix space or regex); dpinfer's TekkenTokenizer implements only that");
    }
    if (pattern == kTekkenPattern) {
      tekken = true;
    } else if (pattern == kLlama3Pattern) {
      tekken = false;
    } else {
      throw bad("pre_tokenizer.pretokenizers[0].pattern.Regex",
                describe(json(pattern)) + " is neither Tekken's pattern nor the Llama 3 one transformers' Mistral "
                                          "conversion writes; dpinfer's TekkenTokenizer implements only those");
    }
    padding = doc.value("padding", json());
    truncation = doc.value("truncation", json());
    bpe::read_json_added_tokens(doc, path, extra);
  }

  void add_tokens(bpe::TokenizerConfig& config, const std::vector<std::pair<int64_t, AddedToken>>& extra,
                  const json& padding, const json& truncation, const std::string& json_path) {
    const json& c = config.config;
    for (const auto& entry : extra) {
      bool known = std::any_of(config.decoder.begin(), config.decoder.end(),
                               [&](const auto& d) { return d.second.content == entry.second.content; });
      if (!known) config.decoder.push_back(entry);
    }
    std::vector<std::string> raw, normalized;
    for (auto& [id, token] : bpe::resolve_added_tokens(config, vocab)) {
      if (token.lstrip || token.rstrip || token.single_word) {
        throw Error("tokenizer file " + config.path + ": added token " + describe(json(token.content)) +
                    " sets lstrip, rstrip or single_word, which dpinfer's TekkenTokenizer does not implement");
      }
      added_by_content[token.content] = id;
      (token.is_normalized() ? normalized_index : raw_index).push_back(added.size());
      (token.is_normalized() ? normalized : raw).push_back(token.content);
      added.push_back(token);
      added_ids.push_back(id);
    }
    raw_finder = bpe::AddedTokenFinder(std::move(raw));
    normalized_finder = bpe::AddedTokenFinder(std::move(normalized));

    // Ref: PreTrainedTokenizerFast.__init__: tokenizer.json's padding gives pad_token and
    // padding_side, its truncation truncation_side, where the config does not.
    if (padding.is_object() && config.find("pad_token") == nullptr && padding.value("pad_token", json()).is_string()) {
      AddedToken t;
      t.content = padding["pad_token"].get<std::string>();
      t.special = true;
      config.set("pad_token", t);
    }
    special = bpe::SpecialTokenIds::resolve(config, added_by_content, vocab);

    auto side = [&](const char* key, const json& section, bool fallback) {
      auto it = c.find(key);
      if (it != c.end() && !it->is_null()) {
        if (*it == "left") return true;
        if (*it == "right") return false;
        throw Error("tokenizer file " + config.path + ": " + key + " must be \"right\" or \"left\", got " +
                    describe(*it));
      }
      if (section.is_object() && section.contains("direction")) {
        const json& d = section["direction"];
        if (d == "Left") return true;
        if (d == "Right") return false;
        throw Error("tokenizer file " + json_path + ": " + (&section == &padding ? "padding" : "truncation") +
                    ".direction must be \"Left\" or \"Right\", got " + describe(d));
      }
      return fallback;
    };
    // The class attribute: LlamaTokenizerFast pads on the left, PreTrainedTokenizerFast on the right.
    const std::string cls = c.value("tokenizer_class", json()).is_string() ? c["tokenizer_class"].get<std::string>() : "";
    pad_left = side("padding_side", padding, cls == "LlamaTokenizerFast" || cls == "LlamaTokenizer");
    truncate_left = side("truncation_side", truncation, false);
    bpe::refuse_split_special_tokens(c, config.path);
    max_length = bpe::parse_model_max_length(c, config.path, kNoModelMaxLength, 1);
  }
};

TekkenTokenizer::TekkenTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

TekkenTokenizer TekkenTokenizer::from_dir(const std::string& tokenizer_dir) {
  const std::string dir = tokenizer_dir.empty() || tokenizer_dir.back() == '/' ? tokenizer_dir : tokenizer_dir + "/";
  auto impl = std::make_shared<Impl>();
  impl->dir = dir;
  const std::string json_path = dir + "tokenizer.json";
  if (!bpe::file_exists(json_path)) bpe::read_file(json_path, kTekkenFilesHint);  // throws, naming it
  std::vector<std::pair<int64_t, AddedToken>> extra;
  json padding, truncation;
  impl->load_tokenizer_json(json_path, extra, padding, truncation);
  // LlamaTokenizerFast's defaults; the folder's config states its own.
  bpe::TokenizerConfig config =
      bpe::read_tokenizer_config(dir, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}});
  impl->add_tokens(config, extra, padding, truncation, json_path);
  impl->symbol_ids.reserve(impl->merges.symbols().size());
  for (const std::string& symbol : impl->merges.symbols()) impl->symbol_ids.push_back(impl->vocab.at(symbol));
  return TekkenTokenizer(std::move(impl));
}

std::vector<int64_t> TekkenTokenizer::tokenize(const std::string& text) const {
  bpe::check_utf8(text);
  return impl_->tokenize(text);
}

Encoding TekkenTokenizer::encode_unpadded(const std::string& text, int max_length) const {
  return bpe::truncated_encoding(tokenize(text), max_length, impl_->truncate_left);
}

Encoding TekkenTokenizer::encode(const std::string& text, int max_length) const {
  std::vector<Encoding> one = encode_batch({text}, max_length, Padding::kMaxLength);
  return std::move(one[0]);
}

std::optional<int64_t> TekkenTokenizer::token_id(const std::string& token) const {
  return bpe::token_id_of(token, impl_->added_by_content, impl_->vocab);
}

int64_t TekkenTokenizer::pad_id() const {
  if (!impl_->special.pad) {
    throw Error("tokenizer folder " + impl_->dir +
                " defines no pad_token, which padding needs; set it in tokenizer_config.json (Tekken's is <pad>)");
  }
  return *impl_->special.pad;
}

bool TekkenTokenizer::pads_left() const { return impl_->pad_left; }
bool TekkenTokenizer::tekken_pattern() const { return impl_->tekken; }
int TekkenTokenizer::model_max_length() const { return impl_->max_length; }
size_t TekkenTokenizer::vocab_size() const { return impl_->vocab.size(); }

std::vector<SpecialToken> TekkenTokenizer::special_tokens() const { return impl_->special.list(); }

}  // namespace dpinfer::pipeline

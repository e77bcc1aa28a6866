// Ref: transformers/models/qwen2/tokenization_qwen2.py (Qwen2Tokenizer, PRETOKENIZE_REGEX),
//      transformers/convert_slow_tokenizer.py (Qwen2Converter: what Qwen2TokenizerFast runs),
//      tokenizers/src/tokenizer/added_vocabulary.rs (AddedVocabulary::extract_and_normalize,
//      find_matches), tokenizers/src/models/bpe/model.rs.
#include "dpinfer/pipeline/text/qwen2_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "byte_level_bpe.h"
#include "dpinfer/util/error.h"
#include "pretokenize_patterns.h"
#include "qwen2_unicode_tables.h"
#include "tokenizer_files.h"
#include "unicode_text.h"

namespace dpinfer::pipeline {
namespace {

using bpe::AddedToken;
using bpe::describe;
using nlohmann::json;

// tokenization_qwen2.py PRETOKENIZE_REGEX, as Qwen2Converter and tokenizer.json write it.
constexpr std::string_view kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kFilesHint = "a Qwen2 tokenizer folder needs vocab.json and merges.txt, or tokenizer.json";

using unicode::kQwenSpace;

// Where the added tokens of `finder` are in `text`, with their lstrip/rstrip applied as
// tokenizers' AddedVocabulary::find_matches does (Unicode White_Space is eaten): each
// entry is (added token index or -1 for text, begin, end).
struct Split {
  int64_t token;
  size_t begin, end;
};

// Whether the character of valid UTF-8 `text` that starts at `begin` and ends at `end` is
// Unicode White_Space (Rust regex's \s, which tokenizers' lstrip/rstrip use).
bool is_space(std::string_view text, size_t begin, size_t end) {
  std::u32string cp = unicode::decode_utf8(text.substr(begin, end - begin));
  return cp.size() == 1 && unicode::qwen_class(cp[0]) == kQwenSpace;
}

size_t next_char(std::string_view text, size_t pos) {
  auto lead = static_cast<unsigned char>(text[pos]);
  return pos + (lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4);
}

size_t previous_char(std::string_view text, size_t pos) {
  size_t k = pos - 1;
  while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
  return k;
}

}  // namespace

struct Qwen2Tokenizer::Impl {
  std::unordered_map<std::string, int64_t> vocab;
  bpe::Merges merges;                 // 0..255 the byte symbols in byte order
  std::vector<int64_t> symbol_ids;    // symbol -> id
  bool nfc = true;                    // tokenizer.json may have no normalizer
  bool ignore_merges = false;         // tokenizer.json's BPE option

  std::vector<AddedToken> added;      // in the order they were added
  std::vector<int64_t> added_ids;     // parallel to `added`
  std::unordered_map<std::string, int64_t> added_by_content;
  bpe::AddedTokenFinder raw_finder;         // normalized=false tokens, on the raw text
  std::vector<size_t> raw_index;            // finder index -> index in `added`
  bpe::AddedTokenFinder normalized_finder;  // normalized=true tokens, on NFC'd text
  std::vector<size_t> normalized_index;

  bpe::SpecialTokenIds special;
  std::string dir;
  int max_length = kNoModelMaxLength;
  bool pad_left = false;
  bool truncate_left = false;

  bpe::WordCache cache;

  // Ref: BPE::tokenize (tokenizers), Qwen2Tokenizer.bpe: `piece` is UTF-8.
  void bpe(const std::string& piece, std::vector<int64_t>& out) const {
    bpe::encode_piece(piece, vocab, merges, symbol_ids, ignore_merges, cache, out);
  }

  // Ref: Qwen2Converter's pre_tokenizer (Split on kPattern, isolated; ByteLevel) then BPE.
  void tokenize_text(std::u32string_view text, std::vector<int64_t>& out) const {
    std::string piece;
    for (size_t i = 0; i < text.size();) {
      size_t len = unicode::match_gpt4_style(text, i, 1);
      piece.clear();
      for (size_t k = i; k < i + len; ++k) unicode::append_utf8(text[k], piece);
      bpe(piece, out);
      i += len;
    }
  }

  std::vector<Split> find_added(std::string_view text, const bpe::AddedTokenFinder& finder,
                                const std::vector<size_t>& index) const {
    std::vector<Split> out;
    size_t start_offset = 0;
    for (const bpe::AddedTokenFinder::Match& m : finder.find(text)) {
      const AddedToken& t = added[index[m.token]];
      size_t start = m.begin, stop = m.end;
      if (t.lstrip) {
        while (start > 0 && is_space(text, previous_char(text, start), start)) start = previous_char(text, start);
        start = std::max(start, start_offset);
      }
      if (t.rstrip) {
        while (stop < text.size() && is_space(text, stop, next_char(text, stop))) stop = next_char(text, stop);
      }
      if (start_offset < start) out.push_back({-1, start_offset, start});
      out.push_back({int64_t(index[m.token]), start, stop});
      start_offset = stop;
    }
    if (start_offset != text.size() || out.empty()) out.push_back({-1, start_offset, text.size()});
    return out;
  }

  // Ref: AddedVocabulary::extract_and_normalize, then the pre-tokenizer and the model.
  std::vector<int64_t> tokenize(std::string_view text) const {
    std::vector<int64_t> ids;
    for (const Split& raw : find_added(text, raw_finder, raw_index)) {
      if (raw.token >= 0) {
        ids.push_back(added_ids[size_t(raw.token)]);
        continue;
      }
      std::u32string cps = unicode::decode_utf8(text.substr(raw.begin, raw.end - raw.begin));
      // Below U+0300 nothing decomposes, composes or reorders.
      if (nfc && std::any_of(cps.begin(), cps.end(), [](char32_t c) { return c >= 0x300; })) {
        cps = unicode::nfc_tokenizers(cps);
      }
      if (normalized_finder.empty()) {
        tokenize_text(cps, ids);
        continue;
      }
      std::string normalized;
      for (char32_t c : cps) unicode::append_utf8(c, normalized);
      for (const Split& s : find_added(normalized, normalized_finder, normalized_index)) {
        if (s.token >= 0) {
          ids.push_back(added_ids[size_t(s.token)]);
        } else {
          tokenize_text(unicode::decode_utf8(std::string_view(normalized).substr(s.begin, s.end - s.begin)), ids);
        }
      }
    }
    return ids;
  }

  // Ref: Qwen2Tokenizer.__init__: every line but a first "#version:" one and blank ones
  // (each stripped, then split on whitespace); a repeated pair keeps its last rank.
  void load_merges_txt(const std::string& path) {
    const std::string text = bpe::read_file(path, kFilesHint);
    std::string_view all(text);
    uint32_t rank = 0;
    size_t line_no = 0;
    while (!all.empty()) {
      size_t nl = all.find('\n');
      std::string_view line = all.substr(0, nl);
      all.remove_prefix(nl == std::string_view::npos ? all.size() : nl + 1);
      ++line_no;
      std::vector<std::string_view> parts = bpe::split_merge_line(line);
      if (parts.empty() || (line_no == 1 && parts[0].substr(0, 9) == "#version:")) continue;
      if (parts.size() != 2) {
        throw Error("tokenizer file " + path + ": line " + std::to_string(line_no) + " " +
                    describe(json(std::string(line))) + " is not a merge of two symbols");
      }
      add_merge(std::string(parts[0]), std::string(parts[1]), rank++, path, "line " + std::to_string(line_no));
    }
  }

  void add_merge(const std::string& left, const std::string& right, uint32_t rank, const std::string& path,
                 const std::string& where) {
    bpe::check_merge(vocab, left, right, path, where);
    merges.add(left, right, rank);
  }

  // tokenizer.json's model, normalizer and pre-tokenizer; its added tokens go to `extra`.
  void load_tokenizer_json(const std::string& path, std::vector<std::pair<int64_t, AddedToken>>& extra) {
    const json doc = bpe::parse_json(path);
    auto bad = [&](const std::string& field, const std::string& what) {
      return Error("tokenizer file " + path + ": " + field + " " + what);
    };
    if (!doc.is_object()) throw bad("the document", "must be a json object, got " + describe(doc));
    auto get = [&](const json& obj, const char* key) -> const json& {
      static const json null;
      auto it = obj.find(key);
      return it == obj.end() ? null : *it;
    };
    bpe::JsonBpeModel model = bpe::read_json_bpe_model(doc, path, "Qwen2");
    vocab = std::move(model.vocab);
    ignore_merges = model.ignore_merges;
    for (size_t i = 0; i < model.merges.size(); ++i) merges.add(model.merges[i].first, model.merges[i].second, uint32_t(i));

    const json& normalizer = get(doc, "normalizer");
    auto is_nfc = [](const json& n) { return n.is_object() && n.value("type", "") == "NFC"; };
    if (normalizer.is_null()) {
      nfc = false;
    } else if (!is_nfc(normalizer) &&
               !(normalizer.value("type", "") == "Sequence" && normalizer.contains("normalizers") &&
                 normalizer["normalizers"].is_array() && normalizer["normalizers"].size() == 1 &&
                 is_nfc(normalizer["normalizers"][0]))) {
      throw bad("normalizer", describe(normalizer) + " is not supported; Qwen2's is NFC");
    }
    const json& pre = get(doc, "pre_tokenizer");
    const json* steps = pre.is_object() && pre.value("type", "") == "Sequence" ? &get(pre, "pretokenizers") : nullptr;
    bool qwen2_pre = steps != nullptr && steps->is_array() && steps->size() == 2;
    if (qwen2_pre) {
      const json& split = (*steps)[0];
      const json& bytes = (*steps)[1];
      qwen2_pre = split.is_object() && split.value("type", "") == "Split" && split.contains("pattern") &&
                  split["pattern"].is_object() && split["pattern"].value("Regex", "") == kPattern &&
                  split.value("behavior", "") == "Isolated" && split.value("invert", true) == false &&
                  bytes.is_object() && bytes.value("type", "") == "ByteLevel" &&
                  bytes.value("add_prefix_space", true) == false && bytes.value("use_regex", true) == false;
    }
    if (!qwen2_pre) {
      throw bad("pre_tokenizer", "is not Qwen2's (Split on its pattern, isolated, then ByteLevel without a prefix "
                                 "space or regex); dpinfer's Qwen2Tokenizer implements only that");
    }
    const json& post = get(doc, "post_processor");
    if (!post.is_null() && !(post.is_object() && post.value("type", "") == "ByteLevel")) {
      throw bad("post_processor", describe(post) + " is not supported; Qwen2's is ByteLevel (it adds no tokens)");
    }

    bpe::read_json_added_tokens(doc, path, extra);
  }

  void add_tokens(bpe::TokenizerConfig& config, std::vector<std::pair<int64_t, AddedToken>> extra) {
    const json& c = config.config;
    // Ref: from_pretrained's legacy path: added_tokens.json, special if among the specials.
    if (!config.has_decoder) {
      if (std::optional<json> file = bpe::parse_json_if_present(dir + "added_tokens.json")) {
        const std::string path = dir + "added_tokens.json";
        if (!file->is_object()) throw Error("tokenizer file " + path + ": expected an object of token -> id, got " + describe(*file));
        std::vector<std::string> specials;
        for (const AddedToken& t : config.special_tokens()) specials.push_back(t.content);
        for (auto it = file->begin(); it != file->end(); ++it) {
          if (!it->is_number_integer() || it->get<int64_t>() < 0) {
            throw Error("tokenizer file " + path + ": the id of token " + describe(json(it.key())) +
                        " must be a token id, got " + describe(*it));
          }
          AddedToken t;
          t.content = it.key();
          t.special = std::find(specials.begin(), specials.end(), t.content) != specials.end();
          t.normalized = !t.special;
          config.decoder.emplace_back(it->get<int64_t>(), t);
        }
      }
    }
    for (const auto& entry : extra) {
      const AddedToken& t = entry.second;
      bool known = std::any_of(config.decoder.begin(), config.decoder.end(),
                               [&](const auto& d) { return d.second.content == t.content; });
      if (!known) config.decoder.emplace_back(entry.first, t);
    }

    for (auto& [id, token] : bpe::resolve_added_tokens(config, vocab)) {
      if (token.single_word) {
        throw Error("tokenizer file " + config.path + ": added token " + describe(json(token.content)) +
                    " sets single_word, which dpinfer's Qwen2Tokenizer does not implement");
      }
      added_by_content[token.content] = id;
      added.push_back(token);
      added_ids.push_back(id);
    }
    std::vector<std::string> raw, normalized;
    for (size_t i = 0; i < added.size(); ++i) {
      if (added[i].is_normalized() && nfc) {
        std::string content;
        for (char32_t cp : unicode::nfc_tokenizers(unicode::decode_utf8(added[i].content))) {
          unicode::append_utf8(cp, content);
        }
        normalized.push_back(content);
        normalized_index.push_back(i);
      } else if (added[i].is_normalized()) {
        normalized.push_back(added[i].content);
        normalized_index.push_back(i);
      } else {
        raw.push_back(added[i].content);
        raw_index.push_back(i);
      }
    }
    raw_finder = bpe::AddedTokenFinder(std::move(raw));
    normalized_finder = bpe::AddedTokenFinder(std::move(normalized));

    special = bpe::SpecialTokenIds::resolve(config, added_by_content, vocab);

    auto side = [&](const char* key) {
      auto it = c.find(key);
      if (it == c.end() || it->is_null() || *it == "right") return false;
      if (*it == "left") return true;
      throw Error("tokenizer file " + config.path + ": " + key + " must be \"right\" or \"left\", got " + describe(*it));
    };
    pad_left = side("padding_side");
    truncate_left = side("truncation_side");
    bpe::refuse_split_special_tokens(c, config.path);
    max_length = bpe::parse_model_max_length(c, config.path, kNoModelMaxLength, 1);
  }
};

Qwen2Tokenizer::Qwen2Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Qwen2Tokenizer Qwen2Tokenizer::from_dir(const std::string& tokenizer_dir) {
  const std::string dir = tokenizer_dir.empty() || tokenizer_dir.back() == '/' ? tokenizer_dir : tokenizer_dir + "/";
  auto impl = std::make_shared<Impl>();
  impl->dir = dir;
  for (const std::string& b : bpe::byte_symbols()) impl->merges.intern(b);
  const bool have_vocab = bpe::file_exists(dir + "vocab.json"), have_merges = bpe::file_exists(dir + "merges.txt");
  std::vector<std::pair<int64_t, AddedToken>> extra;
  if ((have_vocab && have_merges) || !bpe::file_exists(dir + "tokenizer.json")) {
    // A missing file is reported by read_file, naming it.
    if (!have_vocab) bpe::read_file(dir + "vocab.json", kFilesHint);
    impl->vocab = bpe::read_vocab(dir + "vocab.json");
    bpe::check_byte_symbols(impl->vocab, dir + "vocab.json");
    impl->load_merges_txt(dir + "merges.txt");
  } else {
    impl->load_tokenizer_json(dir + "tokenizer.json", extra);
  }
  // Ref: Qwen2Tokenizer.__init__'s defaults.
  bpe::TokenizerConfig config = bpe::read_tokenizer_config(
      dir, {{"unk_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"pad_token", "<|endoftext|>"}});
  if (!config.has_decoder && extra.empty() && bpe::file_exists(dir + "tokenizer.json")) {
    // from_pretrained's legacy path reads tokenizer.json's added tokens beside vocab.json too.
    bpe::read_json_added_tokens(bpe::parse_json(dir + "tokenizer.json"), dir + "tokenizer.json", extra);
  }
  impl->add_tokens(config, std::move(extra));
  impl->symbol_ids.reserve(impl->merges.symbols().size());
  for (const std::string& symbol : impl->merges.symbols()) impl->symbol_ids.push_back(impl->vocab.at(symbol));
  return Qwen2Tokenizer(std::move(impl));
}

std::vector<int64_t> Qwen2Tokenizer::tokenize(const std::string& text) const {
  bpe::check_utf8(text);
  return impl_->tokenize(text);
}

Encoding Qwen2Tokenizer::encode_unpadded(const std::string& text, int max_length) const {
  return bpe::truncated_encoding(tokenize(text), max_length, impl_->truncate_left);
}

Encoding Qwen2Tokenizer::encode(const std::string& text, int max_length) const {
  std::vector<Encoding> one = encode_batch({text}, max_length, Padding::kMaxLength);
  return std::move(one[0]);
}

std::optional<int64_t> Qwen2Tokenizer::token_id(const std::string& token) const {
  return bpe::token_id_of(token, impl_->added_by_content, impl_->vocab);
}

int64_t Qwen2Tokenizer::pad_id() const {
  if (!impl_->special.pad) {
    throw Error("tokenizer folder " + impl_->dir +
                " defines no pad_token, which padding needs; set it in tokenizer_config.json (Qwen's is <|endoftext|>)");
  }
  return *impl_->special.pad;
}

bool Qwen2Tokenizer::pads_left() const { return impl_->pad_left; }
std::optional<int64_t> Qwen2Tokenizer::eos_id() const { return impl_->special.eos; }
int Qwen2Tokenizer::model_max_length() const { return impl_->max_length; }
size_t Qwen2Tokenizer::vocab_size() const { return impl_->vocab.size(); }

std::vector<SpecialToken> Qwen2Tokenizer::special_tokens() const { return impl_->special.list(); }

}  // namespace dpinfer::pipeline

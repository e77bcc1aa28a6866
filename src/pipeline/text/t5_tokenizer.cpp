// Ref: transformers/models/t5/tokenization_t5_fast.py (T5TokenizerFast: its tokenizer.json
//      splits on the added tokens, then Precompiled charsmap + Metaspace + Unigram, then
//      TemplateProcessing "$A </s>"), transformers/models/t5/tokenization_t5.py (T5Tokenizer:
//      the same through sentencepiece, the extra ids' ids and flags),
//      transformers/tokenization_utils.py (PreTrainedTokenizer.tokenize: lstrip/rstrip).
#include "dpinfer/pipeline/text/t5_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "byte_level_bpe.h"
#include "dpinfer/util/error.h"
#include "tokenizer_files.h"
#include "unicode_text.h"

namespace dpinfer::pipeline {
namespace {

using bpe::AddedToken;
using bpe::describe;
using nlohmann::json;

// `text` without Python-whitespace on the left and/or right (str.lstrip / str.rstrip).
std::string strip_space(const std::string& text, bool left, bool right) {
  std::u32string cps = unicode::decode_utf8(text);
  size_t begin = 0, end = cps.size();
  while (left && begin < end && unicode::is_python_space(cps[begin])) ++begin;
  while (right && end > begin && unicode::is_python_space(cps[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) unicode::append_utf8(cps[i], out);
  return out;
}

// tokenizer_config.json's extra_ids: how many <extra_id_N> T5Tokenizer appends (100).
int64_t parse_extra_ids(const json& config, const std::string& path) {
  auto it = config.find("extra_ids");
  if (it == config.end() || it->is_null()) return 100;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100000) {
    throw Error("tokenizer file " + path + ": extra_ids must be an integer from 0 to 100000, got " + describe(*it));
  }
  return it->get<int64_t>();
}

}  // namespace

struct T5Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  int64_t pieces = 0;              // sp.GetPieceSize()
  std::vector<AddedToken> added;   // in the order they were added
  std::vector<int64_t> added_ids;  // parallel to `added`
  std::unordered_map<std::string, size_t> added_index;
  bpe::AddedTokenFinder finder;  // over `added`
  int64_t eos = 1, unk = 2, pad = 0;
  std::string eos_token, unk_token, pad_token;
  int max_length = kDefaultModelMaxLength;
  size_t size = 0;  // len(tokenizer)
  std::string model_path;

  // Ref: PreTrainedTokenizer.tokenize (Trie.split, then the neighbours of an lstrip/rstrip
  // token stripped) and tokenizers' AddedVocabulary::split_with_indices, which agree here;
  // every other piece through SentencePieceProcessor::Encode (T5Tokenizer._tokenize with
  // legacy=True: each piece gets its own dummy prefix "▁").
  std::vector<int64_t> tokenize(std::string_view text) const {
    std::vector<std::string> chunks;
    std::vector<int64_t> chunk_added;  // index into `added`, or -1 for text
    size_t start = 0;
    for (const bpe::AddedTokenFinder::Match& m : finder.find(text)) {
      chunks.emplace_back(text.substr(start, m.begin - start));
      chunk_added.push_back(-1);
      chunks.push_back(added[m.token].content);
      chunk_added.push_back(int64_t(m.token));
      start = m.end;
    }
    chunks.emplace_back(text.substr(start));
    chunk_added.push_back(-1);

    for (size_t k = 0; k < chunks.size(); ++k) {
      if (chunk_added[k] < 0) continue;
      const AddedToken& t = added[size_t(chunk_added[k])];
      if (t.rstrip && k + 1 < chunks.size()) chunks[k + 1] = strip_space(chunks[k + 1], true, false);
      if (t.lstrip && k > 0) chunks[k - 1] = strip_space(chunks[k - 1], false, true);
    }

    std::vector<int64_t> ids;
    std::vector<int> piece_ids;
    for (size_t k = 0; k < chunks.size(); ++k) {
      if (chunk_added[k] >= 0) {
        ids.push_back(added_ids[size_t(chunk_added[k])]);
        continue;
      }
      if (chunks[k].empty()) continue;
      sentencepiece::util::Status status = sp.Encode(chunks[k], &piece_ids);
      if (!status.ok()) throw Error("sentencepiece could not encode the prompt: " + status.ToString());
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    return ids;
  }

  // Ref: T5Tokenizer.__init__ (without added_tokens_decoder: <extra_id_i> gets id
  // pieces - 1 + extra_ids - i, lstrip and rstrip) and PreTrainedTokenizer.__init__ (the
  // decoder's tokens keep their ids; each special token not among them takes its piece id,
  // or else the next id).
  void add_tokens(bpe::TokenizerConfig& config, const std::string& dir) {
    if (!config.has_decoder) {
      const int64_t extra_ids = parse_extra_ids(config.config, config.path);
      for (int64_t i = 0; i < extra_ids; ++i) {
        AddedToken t;
        t.content = "<extra_id_" + std::to_string(i) + ">";
        t.lstrip = t.rstrip = true;
        t.special = true;
        t.normalized = false;
        config.decoder.emplace_back(pieces - 1 + extra_ids - i, t);
      }
    }
    std::unordered_map<std::string, int64_t> vocab;
    vocab.reserve(size_t(pieces));
    for (int64_t i = 0; i < pieces; ++i) vocab.emplace(sp.IdToPiece(int(i)), i);
    std::vector<std::string> contents;
    for (auto& [id, token] : bpe::resolve_added_tokens(config, vocab)) {
      if (id < 0) throw Error("tokenizer file " + config.path + ": added token id " + std::to_string(id) + " is negative");
      added_index[token.content] = added.size();
      contents.push_back(token.content);
      added.push_back(token);
      added_ids.push_back(id);
    }
    finder = bpe::AddedTokenFinder(std::move(contents));

    std::vector<int64_t> outside;
    for (int64_t id : added_ids) {
      if (id >= pieces && std::find(outside.begin(), outside.end(), id) == outside.end()) outside.push_back(id);
    }
    size = size_t(pieces) + outside.size();

    // Ref: convert_tokens_to_ids: added tokens, then the pieces, then unk.
    auto special = [&](const char* key) -> const std::string& {
      if (const AddedToken* t = config.find(key)) return t->content;
      throw Error("tokenizer folder " + dir + " defines no " + key +
                  "; set it in tokenizer_config.json or special_tokens_map.json");
    };
    auto token_id = [&](const std::string& token) -> int64_t {
      if (auto it = added_index.find(token); it != added_index.end()) return added_ids[it->second];
      return sp.PieceToId(token);  // unk_id() for a piece it lacks
    };
    eos_token = special("eos_token");
    unk_token = special("unk_token");
    pad_token = special("pad_token");
    eos = token_id(eos_token);
    unk = token_id(unk_token);
    pad = token_id(pad_token);
  }
};

T5Tokenizer::T5Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

T5Tokenizer T5Tokenizer::from_dir(const std::string& tokenizer_dir) {
  const std::string dir = tokenizer_dir.empty() || tokenizer_dir.back() == '/' ? tokenizer_dir : tokenizer_dir + "/";
  auto impl = std::make_shared<Impl>();
  impl->model_path = dir + "spiece.model";
  if (!bpe::file_exists(impl->model_path) && bpe::file_exists(dir + "tokenizer.json")) {
    // See README "T5 tokenizer": every diffusers T5 folder we know ships spiece.model.
    throw Error("tokenizer folder " + dir + " has tokenizer.json but no spiece.model, which dpinfer's T5 tokenizer reads; "
                "download spiece.model from the same repository folder (e.g. FLUX.1's tokenizer_2/spiece.model)");
  }
  const std::string model = bpe::read_file(
      impl->model_path, "a T5 tokenizer folder needs spiece.model (SentencePiece) as diffusers saves it");
  sentencepiece::util::Status status = impl->sp.LoadFromSerializedProto(model);
  if (!status.ok()) {
    throw Error("tokenizer file " + impl->model_path + " is not a SentencePiece model (" + status.ToString() +
                "); re-download the tokenizer folder");
  }
  impl->pieces = impl->sp.GetPieceSize();
  if (impl->pieces <= 0) throw Error("tokenizer file " + impl->model_path + " holds no pieces; re-download it");

  bpe::TokenizerConfig config =
      bpe::read_tokenizer_config(dir, {{"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}});
  for (const char* side : {"padding_side", "truncation_side"}) {
    auto it = config.config.find(side);
    if (it != config.config.end() && !it->is_null() && *it != "right") {
      throw Error("tokenizer file " + config.path + ": " + side + " " + describe(*it) +
                  " is not supported; only \"right\" (the T5 default) is");
    }
  }
  impl->max_length = bpe::parse_model_max_length(config.config, config.path, kDefaultModelMaxLength, 1);
  impl->add_tokens(config, dir);
  return T5Tokenizer(std::move(impl));
}

std::vector<int64_t> T5Tokenizer::tokenize(const std::string& text) const {
  bpe::check_utf8(text);
  return impl_->tokenize(text);
}

Encoding T5Tokenizer::encode_unpadded(const std::string& text, int max_length) const {
  if (max_length < 1) {
    throw Error("tokenizer max_length must be at least 1 (room for </s>), got " + std::to_string(max_length));
  }
  // T5TokenizerFast's TemplateProcessing appends </s> always (the slow tokenizer skips it
  // when the text already ends in </s>; the fast one, which the folders name, is followed).
  std::vector<int64_t> ids = tokenize(text);
  const size_t room = size_t(max_length) - 1;
  Encoding out;
  out.dropped_tokens = ids.size() > room ? int64_t(ids.size() - room) : 0;
  ids.resize(std::min(ids.size(), room));
  ids.push_back(impl_->eos);
  out.ids = std::move(ids);
  out.attention_mask.assign(out.ids.size(), 1);
  return out;
}

Encoding T5Tokenizer::encode(const std::string& text, int max_length) const {
  Encoding out = encode_unpadded(text, max_length);
  out.ids.resize(size_t(max_length), impl_->pad);
  out.attention_mask.resize(size_t(max_length), 0);
  return out;
}

int64_t T5Tokenizer::eos_id() const { return impl_->eos; }
int64_t T5Tokenizer::unk_id() const { return impl_->unk; }
int64_t T5Tokenizer::pad_id() const { return impl_->pad; }
int T5Tokenizer::model_max_length() const { return impl_->max_length; }
size_t T5Tokenizer::vocab_size() const { return impl_->size; }

std::vector<SpecialToken> T5Tokenizer::special_tokens() const {
  return {{"eos", impl_->eos_token, impl_->eos}, {"pad", impl_->pad_token, impl_->pad},
          {"unk", impl_->unk_token, impl_->unk}};
}

}  // namespace dpinfer::pipeline

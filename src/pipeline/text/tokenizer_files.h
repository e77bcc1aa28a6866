#pragma once
// A tokenizer folder's files as transformers reads them, for CLIP's, Qwen2's and Tekken's tokenizers:
// json with one-line errors naming the file and field, the special and added tokens of
// tokenizer_config.json / special_tokens_map.json, and model_max_length.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline::bpe {

/// The text of `path`. A missing or unreadable file throws dpinfer::Error naming it, then
/// `hint` (what the folder needs).
std::string read_file(const std::string& path,
                      const std::string& hint = "the tokenizer folder needs vocab.json and merges.txt as diffusers "
                                                "saves them");
/// Whether `path` exists (POSIX stat: the PyPI libtorch.so exports its own std::filesystem
/// symbols, and calls can bind to them).
bool file_exists(const std::string& path);
/// `path` parsed; a syntax error throws naming the file, line and column.
nlohmann::json parse_json(const std::string& path);
/// parse_json(path), or nothing when the file does not exist.
std::optional<nlohmann::json> parse_json_if_present(const std::string& path);
/// `value` as json text, cut to 60 characters, for messages.
std::string describe(const nlohmann::json& value);

/// An added or special token. Ref: tokenizers' AddedToken.
struct AddedToken {
  std::string content;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  std::optional<bool> normalized;  ///< unset: not given (tokenizers then uses !special)
  bool special = false;
  bool is_normalized() const { return normalized.value_or(!special); }
};

/// A token as tokenizer_config.json and special_tokens_map.json write it: a string, an
/// AddedToken object ({"content": ..., "lstrip": ...}), or null (none). `field` names it
/// in errors.
std::optional<AddedToken> parse_added_token(const nlohmann::json& value, const std::string& path,
                                            const std::string& field);

/// tokenizer_config.json's model_max_length: `fallback` when absent, null, or past 2^31
/// (transformers' "no limit" int(1e30) among them); an error for a non-integer or one
/// below `minimum`.
int parse_model_max_length(const nlohmann::json& config, const std::string& path, int fallback, int minimum);

/// What tokenizer_config.json and special_tokens_map.json say about special and added
/// tokens, resolved as transformers' from_pretrained does.
struct TokenizerConfig {
  std::string path;       ///< tokenizer_config.json's path, for messages
  nlohmann::json config;  ///< tokenizer_config.json, {} when the folder has none
  /// The special tokens by key, in PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES order
  /// (the order new ids go in): bos_token, eos_token, unk_token, sep_token, pad_token,
  /// cls_token, mask_token. Each is marked special.
  std::vector<std::pair<std::string, std::optional<AddedToken>>> by_key;
  std::vector<AddedToken> additional;                   ///< additional_special_tokens
  std::vector<std::pair<int64_t, AddedToken>> decoder;  ///< added_tokens_decoder, in file order
  bool has_decoder = false;                             ///< added_tokens_decoder given (not null)

  const AddedToken* find(const std::string& key) const;
  void set(const std::string& key, std::optional<AddedToken> token);
  /// The by-key tokens, then the additional ones: the order PreTrainedTokenizer.__init__
  /// adds them in.
  std::vector<AddedToken> special_tokens() const;
};

/// vocab.json: token -> id. Throws naming the file and the token at fault.
std::unordered_map<std::string, int64_t> read_vocab(const std::string& path);

/// Throws dpinfer::Error naming the byte offset and value when `text` is not valid UTF-8.
void check_utf8(const std::string& text);

/// Ref: PreTrainedTokenizerBase.from_pretrained. Starts from the class's `defaults` (key,
/// content), then tokenizer_config.json (when present), then special_tokens_map.json unless
/// the config has added_tokens_decoder (then the map is not read at all).
TokenizerConfig read_tokenizer_config(const std::string& dir,
                                      const std::vector<std::pair<std::string, std::string>>& defaults);

/// Ref: PreTrainedTokenizer.__init__: the decoder's tokens keep their ids, in file order;
/// then each special token not among them takes its vocabulary id, or else the next id past
/// the vocabulary and the added tokens outside it. Tokens with empty content are left out.
std::vector<std::pair<int64_t, AddedToken>> resolve_added_tokens(
    const TokenizerConfig& config, const std::unordered_map<std::string, int64_t>& vocab);

/// tokenizer.json's added_tokens ([{"id": ..., "content": ..., "lstrip": ..., ...}]), appended
/// to `out`; none when absent or null.
void read_json_added_tokens(const nlohmann::json& doc, const std::string& path,
                            std::vector<std::pair<int64_t, AddedToken>>& out);

/// Throws naming `path` and `where` unless `left`, `right` and their concatenation are in `vocab`.
void check_merge(const std::unordered_map<std::string, int64_t>& vocab, const std::string& left,
                 const std::string& right, const std::string& path, const std::string& where);

/// Throws naming `path` unless `vocab` holds the 256 byte symbols (byte_symbols()).
void check_byte_symbols(const std::unordered_map<std::string, int64_t>& vocab, const std::string& path);

/// tokenizer.json's byte-level "model", checked.
struct JsonBpeModel {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  ///< in rank order
  bool ignore_merges = false;
};

/// Reads tokenizer.json's (`doc`, read from `path`) model: type BPE, no subword prefix or
/// suffix, no dropout or byte fallback; the vocabulary (with every byte symbol) and the merges,
/// as lists of two or as "a b" strings (tokenizers < 0.20), each of whose pieces must be in the
/// vocabulary. Throws dpinfer::Error naming the file and field; `family` ("Qwen2") names the
/// tokenizer in messages.
JsonBpeModel read_json_bpe_model(const nlohmann::json& doc, const std::string& path, const std::string& family);

/// The id of `token`: an added token's (`added`, by content), else the vocabulary entry's; nullopt for neither.
std::optional<int64_t> token_id_of(const std::string& token, const std::unordered_map<std::string, int64_t>& added,
                                   const std::unordered_map<std::string, int64_t>& vocab);

/// The special tokens a folder sets (bos, eos, pad, unk) and their ids: an added token's, else the vocabulary
/// entry's; an id stays unset for a token the tokenizer has neither of.
struct SpecialTokenIds {
  std::optional<int64_t> bos, eos, pad, unk;
  std::string bos_token, eos_token, pad_token, unk_token;

  /// `config`'s bos_token, eos_token, pad_token and unk_token, looked up in `added` and then in `vocab`.
  static SpecialTokenIds resolve(const TokenizerConfig& config, const std::unordered_map<std::string, int64_t>& added,
                                 const std::unordered_map<std::string, int64_t>& vocab);
  /// Those set, in the order inspect prints them (Tokenizer::special_tokens()).
  std::vector<SpecialToken> list() const;
};

/// `ids` truncated to `max_length` (from the left with `truncate_left`), unpadded, the mask all ones, and how
/// many were dropped: Tokenizer::encode_unpadded(). Throws dpinfer::Error for a max_length below 1.
Encoding truncated_encoding(std::vector<int64_t> ids, int max_length, bool truncate_left);

/// Throws dpinfer::Error naming `path` when tokenizer_config.json `config` sets split_special_tokens, which the
/// byte-level BPE tokenizers do not implement (they split the added tokens out, transformers' default).
void refuse_split_special_tokens(const nlohmann::json& config, const std::string& path);

}  // namespace dpinfer::pipeline::bpe

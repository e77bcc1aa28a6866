#pragma once
// Mistral's Tekken tokenizer (FLUX.2 [dev]'s Mistral Small 3.1 text encoder) as transformers
// runs the tokenizer.json its Mistral conversion writes, giving LlamaTokenizerFast's ids.

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {

/// The ids `tokenizer(text, add_special_tokens=False)` gives in transformers 4.57 (tokenizers
/// 0.22) for a tokenizer.json made by transformers' Mistral conversion
/// (integrations/mistral.py, convert_tekken_tokenizer): the added tokens (Tekken's 1,000
/// special tokens, <unk> 0 ... <SPECIAL_999>) split out of the raw text first (leftmost,
/// longest), no normalizer, the Split pre-tokenizer's pattern, then byte-level BPE with
/// ignore_merges (a piece that is itself a vocabulary entry is that id; else merged by rank).
/// Two patterns are implemented, whichever tokenizer.json holds: Tekken's own
/// (mistral_common's; what transformers' fix_mistral_regex=True puts in), and Llama 3's, which
/// MistralConverter writes by default and Mistral Small 3.1's Hub folder holds.
///
/// No special tokens are added, whatever the folder's post-processor says: FLUX.2 [dev]'s
/// text starts with <s> and PixtralProcessor calls the tokenizer with add_special_tokens=False.
/// Cheap to copy and safe to use from several threads at once.
class TekkenTokenizer : public Tokenizer {
 public:
  /// model_max_length() when tokenizer_config.json gives none, or transformers' "no limit".
  static constexpr int kNoModelMaxLength = std::numeric_limits<int>::max();

  /// Loads tokenizer.json (its BPE model, pre-tokenizer and added tokens) and
  /// tokenizer_config.json (special and added tokens, padding_side, truncation_side,
  /// model_max_length) as transformers' from_pretrained does. The padding side is the
  /// config's padding_side, else tokenizer.json's padding direction, else the class's:
  /// "left" for tokenizer_class LlamaTokenizerFast (or LlamaTokenizer), "right" otherwise.
  /// Throws dpinfer::Error, one line naming the file and field, for a missing file,
  /// malformed json, a normalizer, a pre-tokenizer other than Split on one of the two
  /// patterns then ByteLevel without regex or prefix space, a model that is not byte-level
  /// BPE, or an added token with lstrip, rstrip or single_word.
  static TekkenTokenizer from_dir(const std::string& tokenizer_dir);

  /// `text` (UTF-8) truncated to max_length ids (truncation_side, "right" by default) and
  /// padded with pad_id() to exactly max_length on the padding side: `tokenizer(text,
  /// add_special_tokens=False, padding="max_length", max_length=max_length, truncation=True)`.
  /// Throws dpinfer::Error for text that is not valid UTF-8 (naming the byte offset), a
  /// max_length below 1, or padding without a pad_token.
  Encoding encode(const std::string& text, int max_length) const override;
  /// The same without padding.
  Encoding encode_unpadded(const std::string& text, int max_length) const override;
  /// All of the ids of `text`, untruncated: `tokenizer(text, add_special_tokens=False)["input_ids"]`.
  std::vector<int64_t> tokenize(const std::string& text) const;

  /// The id of an added token or vocabulary entry ("[INST]" is 3), if any.
  std::optional<int64_t> token_id(const std::string& token) const;
  /// pad_token's id (<pad>, 11). Throws dpinfer::Error when the folder sets no pad_token.
  int64_t pad_id() const override;
  bool pads_left() const override;
  /// Whether tokenizer.json holds Tekken's own pattern (false: Llama 3's).
  bool tekken_pattern() const;
  int model_max_length() const override;
  /// Entries of the BPE vocabulary (131,072 in Tekken's, the special tokens included).
  size_t vocab_size() const override;
  /// Those of bos, eos, pad and unk that the folder sets.
  std::vector<SpecialToken> special_tokens() const override;

 private:
  struct Impl;
  explicit TekkenTokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dpinfer::pipeline

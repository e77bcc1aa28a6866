#pragma once
// Qwen2's byte-level BPE tokenizer (Qwen2, Qwen2.5-VL and Qwen3 text encoders: Qwen-Image,
// Z-Image), giving the ids of transformers' Qwen2TokenizerFast.

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {

/// The ids `tokenizer(text)` gives in transformers 4.57's Qwen2TokenizerFast (tokenizers
/// 0.22): the added tokens split out of the raw text first (leftmost, longest; lstrip and
/// rstrip eat Unicode whitespace), NFC on the text between them, Qwen2's pre-tokenizer
/// pattern, then byte-level BPE by merge rank. The slow Qwen2Tokenizer (which diffusers'
/// Qwen-Image loads) gives the same ids except where the two use different Unicode data:
/// 99 combining code points newer than the fast one's NFC tables, letters and digits newer
/// than its Oniguruma's Unicode 16, and an added token ending in ">" followed by U+0338,
/// which the slow one's NFC of the whole text composes into U+226F first.
/// tests/data/tokenizer/qwen2/corpus.json records both where they differ.
///
/// No special tokens are added: Qwen2's chat tokens are in the text. Cheap to copy (copies
/// share the vocabulary and the word cache) and safe to use from several threads at once.
class Qwen2Tokenizer : public Tokenizer {
 public:
  /// model_max_length() when tokenizer_config.json gives none, or transformers' "no limit".
  static constexpr int kNoModelMaxLength = std::numeric_limits<int>::max();

  /// Loads a tokenizer folder as transformers' from_pretrained does:
  /// - vocab.json and merges.txt when both are there (what Qwen2Tokenizer reads, and what
  ///   Qwen2TokenizerFast converts when there is no tokenizer.json);
  /// - else tokenizer.json's BPE model, after checking that its normalizer, pre-tokenizer
  ///   and post-processor are Qwen2's (NFC or none; Split on Qwen2's pattern then ByteLevel;
  ///   ByteLevel or none), so that the ids cannot silently differ;
  /// - the special and added tokens from tokenizer_config.json (added_tokens_decoder, the
  ///   special token keys, additional_special_tokens), or, in folders older than
  ///   added_tokens_decoder, special_tokens_map.json, added_tokens.json and tokenizer.json's
  ///   added_tokens; a tokenizer.json read for its model adds its added_tokens as well.
  /// Throws dpinfer::Error, one line naming the file and field, for a missing file,
  /// malformed json, a merge whose pieces are not in the vocabulary, or a setting this
  /// class does not implement (single_word added tokens, split_special_tokens).
  static Qwen2Tokenizer from_dir(const std::string& tokenizer_dir);

  /// `text` (UTF-8) truncated to max_length ids (truncation_side, "right" by default) and
  /// padded with pad_id() to exactly max_length on the padding side, as `tokenizer(text,
  /// padding="max_length", max_length=max_length, truncation=True)`: Z-Image's call.
  /// Throws dpinfer::Error for text that is not valid UTF-8 (naming the byte offset), a
  /// max_length below 1, or padding without a pad_token.
  Encoding encode(const std::string& text, int max_length) const override;
  /// The same without padding, as `tokenizer(text, max_length=max_length, truncation=True)`:
  /// Qwen-Image's call for a batch of one.
  Encoding encode_unpadded(const std::string& text, int max_length) const override;

  /// All of the ids of `text`, untruncated: `tokenizer(text)["input_ids"]`.
  std::vector<int64_t> tokenize(const std::string& text) const;

  /// The id of an added token or vocabulary entry ("<|im_start|>" is 151644), if any.
  std::optional<int64_t> token_id(const std::string& token) const;
  /// pad_token's id: <|endoftext|>, 151643, in Qwen's folders. Throws dpinfer::Error when
  /// the folder sets pad_token to null.
  int64_t pad_id() const override;
  /// tokenizer_config.json's padding_side is "left".
  bool pads_left() const override;
  /// eos_token's id, if set: <|im_end|> (151645) in the chat models' folders.
  std::optional<int64_t> eos_id() const;
  /// tokenizer_config.json's model_max_length (131072 in Qwen2.5-VL's), or kNoModelMaxLength.
  int model_max_length() const override;
  /// Entries of the BPE vocabulary (151,643 in Qwen's), the added tokens not counted.
  size_t vocab_size() const override;
  /// Those of bos, eos, pad and unk that the folder sets.
  std::vector<SpecialToken> special_tokens() const override;

 private:
  struct Impl;
  explicit Qwen2Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dpinfer::pipeline

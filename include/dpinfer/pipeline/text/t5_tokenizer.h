#pragma once
// The T5 SentencePiece tokenizer of FLUX.1 (tokenizer_2/), SD3 (tokenizer_3/) and Chroma
// (tokenizer/), giving the ids transformers' T5TokenizerFast gives, the class those
// folders name. The Unigram segmentation and the model's precompiled-charsmap
// normalisation are SentencePiece's own (Debian's libsentencepiece), reading spiece.model.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {

/// `tokenizer(text, padding="max_length", max_length=n, truncation=True)` of transformers
/// 4.57's T5TokenizerFast (legacy=True, the default and what the diffusers folders hold):
/// the text split on the added tokens (<pad>, </s>, <unk>, <extra_id_0..N>; the extra ids
/// strip the whitespace around them), every other piece encoded by SentencePiece, the first
/// n - 1 ids kept, </s>, then <pad> up to n. Truncation sets Encoding::dropped_tokens; the
/// family warns as it does for CLIP.
///
/// Known differences from T5TokenizerFast, where dpinfer gives what the slow T5Tokenizer
/// (sentencepiece itself) gives: HF tokenizers' Unigram breaks ties between equal-score
/// segmentations differently ("1,000,000" on the test vocabulary), and it normalises a
/// few combining-mark sequences through the precompiled charsmap differently (a letter with
/// two stacked combining marks). tests/data/tokenizer/t5_corpus.json lists them.
/// Cheap to copy; safe to use from several threads at once.
class T5Tokenizer : public Tokenizer {
 public:
  /// transformers' T5 default, used when tokenizer_config.json gives no model_max_length
  /// (or its "no limit" sentinel): 512, as google/t5-v1_1-xxl and FLUX.1's tokenizer_2.
  static constexpr int kDefaultModelMaxLength = 512;

  /// Loads a T5 tokenizer folder: spiece.model and, when present, tokenizer_config.json and
  /// special_tokens_map.json (special tokens, extra_ids, added_tokens_decoder,
  /// model_max_length). A folder with tokenizer.json but no spiece.model is refused naming
  /// the missing file (see README: "T5 tokenizer"). Throws dpinfer::Error naming the file
  /// and field at fault.
  static T5Tokenizer from_dir(const std::string& tokenizer_dir);

  Encoding encode(const std::string& text, int max_length) const override;
  /// The text's ids, the first max_length - 1 of them, then </s>. Throws dpinfer::Error for
  /// text that is not valid UTF-8 or max_length < 1.
  Encoding encode_unpadded(const std::string& text, int max_length) const override;
  /// The ids of `text` without </s> and untruncated.
  std::vector<int64_t> tokenize(const std::string& text) const;

  int64_t eos_id() const;
  int64_t unk_id() const;
  int64_t pad_id() const override;
  int model_max_length() const override;
  /// len(tokenizer): the SentencePiece pieces plus the added tokens past them (the extra
  /// ids): 32,100 for T5-XXL.
  size_t vocab_size() const override;
  /// eos, pad and unk.
  std::vector<SpecialToken> special_tokens() const override;

 private:
  struct Impl;
  explicit T5Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dpinfer::pipeline

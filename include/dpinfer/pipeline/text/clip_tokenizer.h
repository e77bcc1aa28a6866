#pragma once
// The CLIP BPE tokenizer of Stable Diffusion, giving the ids diffusers feeds its text
// encoder: transformers' slow CLIPTokenizer as StableDiffusionPipeline loads it,
// without ftfy (the BasicTokenizer text cleanup most installs run).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {

/// Byte-level BPE over CLIP's vocabulary, exactly as `tokenizer(prompt,
/// padding="max_length", max_length=n, truncation=True)` in diffusers' encode_prompt:
/// bos, the prompt's tokens (the first max_length - 2), eos, then pad ids up to
/// max_length (Encoding). Cheap to copy (copies share the vocabulary and the word
/// cache) and safe to use from several threads at once.
class CLIPTokenizer : public Tokenizer {
 public:
  /// The model_max_length used when the config gives none, or transformers' "no
  /// limit" sentinel (int(1e30)) or anything else past 2^31: CLIP's 77 positions.
  static constexpr int kDefaultModelMaxLength = 77;

  /// Loads a diffusers tokenizer/ folder: vocab.json, merges.txt and, when present,
  /// tokenizer_config.json and special_tokens_map.json. Special tokens (bos, eos, unk,
  /// pad, ...) resolve as transformers' from_pretrained does: tokenizer_config.json,
  /// overridden by special_tokens_map.json unless the config has added_tokens_decoder;
  /// each may be a string or an {"content": ...} object. Throws dpinfer::Error naming
  /// the file and field for a missing file, malformed json or a bad value.
  static CLIPTokenizer from_dir(const std::string& tokenizer_dir);

  /// `prompt` (UTF-8) as `max_length` ids, truncated and padded as described at
  /// Encoding. Throws dpinfer::Error when `prompt` is not valid UTF-8 (naming the
  /// byte offset) or `max_length` < 2.
  Encoding encode(const std::string& prompt, int max_length) const override;
  /// bos, the prompt's tokens (the first max_length - 2), eos: encode() without padding.
  Encoding encode_unpadded(const std::string& prompt, int max_length) const override;

  /// The token ids of `text` without bos/eos and untruncated (what
  /// `tokenizer(text, padding="longest")` returns between bos and eos).
  std::vector<int64_t> tokenize(const std::string& text) const;

  /// The id of bos_token, <|startoftext|> (49406) in CLIP.
  int64_t bos_id() const;
  /// The id of eos_token, <|endoftext|> (49407) in CLIP.
  int64_t eos_id() const;
  /// The id a BPE piece missing from the vocabulary gets: unk_token's, 49407 in CLIP.
  int64_t unk_id() const;
  /// 49407 (<|endoftext|>) for SD1.x, 0 ("!") for SD2.x.
  int64_t pad_id() const override;
  /// The special tokens' text, as resolved by from_dir(): "<|startoftext|>", "<|endoftext|>", "!", ...
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  const std::string& unk_token() const;
  const std::string& pad_token() const;
  /// tokenizer_config.json's model_max_length (see kDefaultModelMaxLength): the
  /// max_length diffusers encodes prompts with.
  int model_max_length() const override;
  /// Number of entries of vocab.json.
  size_t vocab_size() const override;
  /// bos, eos, pad and unk.
  std::vector<SpecialToken> special_tokens() const override;

 private:
  struct Impl;
  explicit CLIPTokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dpinfer::pipeline

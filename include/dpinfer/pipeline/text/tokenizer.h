#pragma once
// What a pipeline asks of a tokenizer, whatever its kind (CLIP's BPE today; Qwen's
// byte-level BPE and T5's SentencePiece next), and the table that maps a tokenizer
// folder's class in model_index.json to the code that loads it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// The ids of one text, laid out as the text encoder takes them.
struct Encoding {
  /// The text's tokens between the tokenizer's own special tokens (CLIP's bos and eos;
  /// Qwen2 adds none), truncated to fit, then padding: from encode(), exactly the requested
  /// length; from encode_unpadded(), no padding.
  std::vector<int64_t> ids;
  /// 1 for every id that is not padding, 0 for padding.
  std::vector<int64_t> attention_mask;
  /// How many of the text's tokens truncation removed, 0 when all fit. diffusers warns
  /// about these; the caller should too.
  int64_t dropped_tokens = 0;
};

/// A special token, as `dpinfer inspect` reports it.
struct SpecialToken {
  std::string role;   ///< "bos", "eos", "pad", "unk"
  std::string token;  ///< "<|endoftext|>"
  int64_t id = 0;
};

/// How encode_batch() pads, as the reference library's `padding=` argument.
enum class Padding {
  kMaxLength,  ///< padding="max_length": every text to exactly max_length ids (Z-Image, CLIP)
  kLongest,    ///< padding="longest" (or True): to the batch's longest, so one text alone is not padded (Qwen-Image)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// `text` (UTF-8) as `max_length` ids, as `tokenizer(text, padding="max_length",
  /// max_length=max_length, truncation=True)` gives them in the reference library.
  /// Throws dpinfer::Error for text that is not valid UTF-8, or a max_length too small.
  virtual Encoding encode(const std::string& text, int max_length) const = 0;
  /// The same without padding: at most `max_length` ids, all of them real (the mask all
  /// ones), as `tokenizer(text, max_length=max_length, truncation=True)` gives them. An
  /// image that must not depend on its batch-mates encodes its prompt this way.
  virtual Encoding encode_unpadded(const std::string& text, int max_length) const = 0;
  /// `texts` as `tokenizer(texts, padding=..., max_length=max_length, truncation=True)`:
  /// each text as encode_unpadded() gives it, then padded with pad_id() on the padding side
  /// to max_length (kMaxLength) or to the longest of them (kLongest).
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, int max_length, Padding padding) const;
  /// The id padding uses.
  virtual int64_t pad_id() const = 0;
  /// Whether padding goes before the ids (tokenizer_config.json's padding_side "left").
  virtual bool pads_left() const { return false; }
  /// tokenizer_config.json's model_max_length: the length pipelines encode prompts with.
  virtual int model_max_length() const = 0;
  /// Entries of the vocabulary.
  virtual size_t vocab_size() const = 0;
  /// The special tokens, in the order inspect prints them.
  virtual std::vector<SpecialToken> special_tokens() const = 0;
};

/// One kind of tokenizer folder.
struct TokenizerClass {
  std::vector<std::string> class_names;  ///< model_index.json's classes it serves ("CLIPTokenizer", ...)
  std::string config_file;               ///< the config read into the component's config (may be absent)
  std::vector<std::string> needed_files; ///< files the folder must hold
  /// Loads the folder. Throws dpinfer::Error naming the file and field at fault.
  std::unique_ptr<Tokenizer> (*load)(const std::string& dir);
};

/// Every tokenizer kind dpinfer reads.
const std::vector<TokenizerClass>& tokenizer_classes();
/// The kind that serves `class_name`, or nullptr.
const TokenizerClass* find_tokenizer_class(const std::string& class_name);

}  // namespace dpinfer::pipeline

#include <algorithm>

#include "dpinfer/pipeline/text/clip_tokenizer.h"
#include "dpinfer/pipeline/text/qwen2_tokenizer.h"
#include "dpinfer/pipeline/text/t5_tokenizer.h"
#include "dpinfer/pipeline/text/tekken_tokenizer.h"
#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {
namespace {

std::unique_ptr<Tokenizer> load_clip(const std::string& dir) {
  return std::make_unique<CLIPTokenizer>(CLIPTokenizer::from_dir(dir));
}

std::unique_ptr<Tokenizer> load_qwen2(const std::string& dir) {
  return std::make_unique<Qwen2Tokenizer>(Qwen2Tokenizer::from_dir(dir));
}

std::unique_ptr<Tokenizer> load_tekken(const std::string& dir) {
  return std::make_unique<TekkenTokenizer>(TekkenTokenizer::from_dir(dir));
}

std::unique_ptr<Tokenizer> load_t5(const std::string& dir) {
  return std::make_unique<T5Tokenizer>(T5Tokenizer::from_dir(dir));
}

}  // namespace

const std::vector<TokenizerClass>& tokenizer_classes() {
  // One row per kind of tokenizer folder. A new kind is a row here plus its own files.
  static const std::vector<TokenizerClass> table{
      {{"CLIPTokenizer", "CLIPTokenizerFast"}, "tokenizer_config.json", {"vocab.json", "merges.txt"}, load_clip},
      // vocab.json + merges.txt, or tokenizer.json alone: the loader says which is missing.
      {{"Qwen2Tokenizer", "Qwen2TokenizerFast"}, "tokenizer_config.json", {}, load_qwen2},
      // Qwen-Image-Edit's processor folder holds the same tokenizer's files (and the image processor's config,
      // which the family reads).
      {{"Qwen2VLProcessor", "Qwen2_5_VLProcessor"}, "tokenizer_config.json", {}, load_qwen2},
      // spiece.model; a folder with tokenizer.json alone: the loader says what is missing.
      {{"T5Tokenizer", "T5TokenizerFast"}, "tokenizer_config.json", {}, load_t5},
      // Mistral's Tekken (FLUX.2 [dev]'s PixtralProcessor folder) as transformers converts it to
      // tokenizer.json; the loader refuses a tokenizer.json that is not that conversion's.
      {{"PixtralProcessor", "LlamaTokenizerFast", "PreTrainedTokenizerFast"},
       "tokenizer_config.json",
       {"tokenizer.json"},
       load_tekken},
  };
  return table;
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, int max_length,
                                              Padding padding) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  size_t length = 0;
  for (const std::string& text : texts) {
    out.push_back(encode_unpadded(text, max_length));
    length = std::max(length, out.back().ids.size());
  }
  if (padding == Padding::kMaxLength) length = size_t(max_length);
  const bool left = pads_left();
  for (Encoding& e : out) {
    const size_t n = length - e.ids.size();
    if (n == 0) continue;
    auto at_ids = left ? e.ids.begin() : e.ids.end();
    e.ids.insert(at_ids, n, pad_id());
    auto at_mask = left ? e.attention_mask.begin() : e.attention_mask.end();
    e.attention_mask.insert(at_mask, n, 0);
  }
  return out;
}

const TokenizerClass* find_tokenizer_class(const std::string& class_name) {
  for (const TokenizerClass& t : tokenizer_classes())
    for (const std::string& name : t.class_names)
      if (name == class_name) return &t;
  return nullptr;
}

}  // namespace dpinfer::pipeline

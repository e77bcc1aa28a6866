#include "dpinfer/pipeline/text/clip_tokenizer.h"
#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {
namespace {

std::unique_ptr<Tokenizer> load_clip(const std::string& dir) {
  return std::make_unique<CLIPTokenizer>(CLIPTokenizer::from_dir(dir));
}

}  // namespace

const std::vector<TokenizerClass>& tokenizer_classes() {
  // One row per kind of tokenizer folder. A new kind is a row here plus its own files.
  static const std::vector<TokenizerClass> table{
      {{"CLIPTokenizer", "CLIPTokenizerFast"}, "tokenizer_config.json", {"vocab.json", "merges.txt"}, load_clip},
  };
  return table;
}

const TokenizerClass* find_tokenizer_class(const std::string& class_name) {
  for (const TokenizerClass& t : tokenizer_classes())
    for (const std::string& name : t.class_names)
      if (name == class_name) return &t;
  return nullptr;
}

}  // namespace dpinfer::pipeline

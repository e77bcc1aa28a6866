// libFuzzer: a tokenizer folder as CLIPTokenizer, Qwen2Tokenizer and T5Tokenizer read it, then
// one text encoded every way the pipelines encode. The input is the folder's files and the text,
// separated by NUL bytes; the first byte picks the tokenizer and the layout:
//   bits 0-1 00: CLIPTokenizer from  vocab.json \0 merges.txt \0 tokenizer_config.json \0 text
//   bit 0 set:   Qwen2Tokenizer, the same files, or with bit 1 set
//                tokenizer.json \0 (unused) \0 tokenizer_config.json \0 text
//   bits 0-1 10: T5Tokenizer from  spiece.model \0 special_tokens_map.json \0 tokenizer_config.json
//                \0 text, where an empty spiece.model part means the test tokenizer's real one
//                (a SentencePiece model is binary, full of NUL bytes: the fuzzed part only reaches
//                the error path of a model that does not parse)
// An empty part leaves its file out. Bits 2-7 set max_length (1..64).
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dpinfer/pipeline/text/clip_tokenizer.h"
#include "dpinfer/pipeline/text/qwen2_tokenizer.h"
#include "dpinfer/pipeline/text/t5_tokenizer.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

namespace {

/// A folder made once per process, its files rewritten (or removed) for each input, and
/// removed when the process exits (libFuzzer's -max_total_time ends with exit(), which runs
/// static destructors; a crash leaves it for the finding's reproduction).
struct TempFolder {
  std::string path;
  TempFolder() {
    char templ[] = "/tmp/dpinfer-fuzz-tokenizer-XXXXXX";
    if (!::mkdtemp(templ)) std::abort();
    path = std::string(templ) + "/";
  }
  ~TempFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

const std::string& folder() {
  static const TempFolder dir;
  return dir.path;
}

void put(const std::string& name, const std::string& text) {
  const std::string path = folder() + name;
  std::remove(path.c_str());
  if (text.empty()) return;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) std::abort();
}

/// What encode() and encode_unpadded() promise: at most max_length ids (exactly, padded),
/// one mask entry per id.
void check_encoding(const pipeline::Encoding& e, size_t max_length, bool padded) {
  if (e.ids.size() > max_length || (padded && e.ids.size() != max_length)) std::abort();
  if (e.attention_mask.size() != e.ids.size()) std::abort();
}

/// The test T5 tokenizer's spiece.model, read once.
const std::string& real_spiece_model() {
  static const std::string model = [] {
    std::ifstream in(DPINFER_T5_SPIECE_MODEL, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().empty()) std::abort();
    return ss.str();
  }();
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<std::string> parts(4);
  size_t part = 0;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0 && part < 3) {
      ++part;
    } else {
      parts[part] += static_cast<char>(data[i]);
    }
  }
  const bool qwen = mode & 1, tokenizer_json = qwen && (mode & 2), t5 = !qwen && (mode & 2);
  put("vocab.json", tokenizer_json || t5 ? "" : parts[0]);
  put("merges.txt", tokenizer_json || t5 ? "" : parts[1]);
  put("tokenizer.json", tokenizer_json ? parts[0] : "");
  put("spiece.model", !t5 ? "" : parts[0].empty() ? real_spiece_model() : parts[0]);
  put("special_tokens_map.json", t5 ? parts[1] : "");
  put("tokenizer_config.json", parts[2]);
  const int max_length = 1 + (mode >> 2);
  try {
    std::unique_ptr<pipeline::Tokenizer> tokenizer;
    if (qwen) {
      tokenizer = std::make_unique<pipeline::Qwen2Tokenizer>(pipeline::Qwen2Tokenizer::from_dir(folder()));
    } else if (t5) {
      tokenizer = std::make_unique<pipeline::T5Tokenizer>(pipeline::T5Tokenizer::from_dir(folder()));
    } else {
      tokenizer = std::make_unique<pipeline::CLIPTokenizer>(pipeline::CLIPTokenizer::from_dir(folder()));
    }
    const std::string& text = parts[3];
    // CLIP always adds bos and eos, so it needs room for both; T5 adds eos.
    const int length = qwen || t5 ? max_length : std::max(max_length, 2);
    try {
      check_encoding(tokenizer->encode(text, length), length, true);
      check_encoding(tokenizer->encode_unpadded(text, length), length, false);
      for (const auto& e : tokenizer->encode_batch({text, "a"}, length, pipeline::Padding::kLongest))
        if (e.ids.size() > static_cast<size_t>(length)) std::abort();
    } catch (const Error& e) {
      fuzz::check_message(e.what());  // e.g. text that is not UTF-8
    }
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

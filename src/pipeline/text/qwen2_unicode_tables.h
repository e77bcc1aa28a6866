#pragma once
// The Unicode data of the Qwen2 tokenizer, generated into qwen2_unicode_tables.cpp by
// tools/fixtures/make_qwen_tokenizer_goldens.py from tokenizers (Qwen2TokenizerFast's
// Rust side) itself, code point by code point.

#include <cstddef>
#include <cstdint>

namespace dpinfer::pipeline::unicode {

/// The class of Qwen2's pre-tokenizer pattern a code point is in, as Oniguruma matches it.
enum QwenClass : uint8_t { kQwenSpace = 0, kQwenLetter = 1, kQwenNumber = 2, kQwenOther = 3 };

/// `cls` (a QwenClass) holds from `first` up to the next run's `first`; runs are sorted and
/// start at 0.
struct QwenClassRun {
  uint32_t first;
  uint8_t cls;
};

/// Code points `first..last`.
struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

extern const QwenClassRun kQwenClassRuns[];
extern const size_t kQwenClassRunCount;
/// The code points tokenizers' NFC has no data for although Python's unicodedata (the
/// tables of unicode_tables.cpp) has: combining marks and one composite newer than its
/// Unicode version. Sorted.
extern const CodePointRange kFastNfcInert[];
extern const size_t kFastNfcInertCount;

}  // namespace dpinfer::pipeline::unicode

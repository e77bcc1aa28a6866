#pragma once
// The Unicode data of the Tekken tokenizer, generated into tekken_unicode_tables.cpp by
// tools/fixtures/make_tekken_tokenizer_goldens.py from tokenizers (its Oniguruma) itself,
// code point by code point.

#include <cstddef>
#include <cstdint>

namespace dpinfer::pipeline::unicode {

/// The classes of Tekken's pre-tokenizer pattern a code point is in, as bits.
enum TekkenClassBit : uint8_t {
  kTekkenSpace = 1,   ///< \s
  kTekkenLetter = 2,  ///< \p{L}
  kTekkenNumber = 4,  ///< \p{N}
  kTekkenUpper = 8,   ///< [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kTekkenLower = 16,  ///< [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

/// `bits` (TekkenClassBit) hold from `first` up to the next run's `first`; runs are sorted
/// and start at 0.
struct TekkenClassRun {
  uint32_t first;
  uint8_t bits;
};

extern const TekkenClassRun kTekkenClassRuns[];
extern const size_t kTekkenClassRunCount;

}  // namespace dpinfer::pipeline::unicode

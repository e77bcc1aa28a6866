#pragma once
// The Unicode data of the CLIP tokenizer, generated into unicode_tables.cpp by
// tools/fixtures/make_unicode_tables.py from the Python functions transformers calls.

#include <cstddef>
#include <cstdint>

namespace dpinfer::pipeline::unicode {

/// Bits of a code point's properties (see the generator's docstring).
enum PropBits : uint8_t {
  kRegexClassMask = 0x3,  ///< which class of the CLIP regex matches it, one of RegexClass
  kDrop = 1 << 2,         ///< BasicTokenizer._clean_text removes it
  kSeparator = 1 << 3,    ///< a word separator: _clean_text makes it " " or str.split() splits on it
  kCased = 1 << 4,        ///< cased and not case-ignorable (str.lower()'s final-sigma rule)
  kCaseIgnorable = 1 << 5,
};

/// The class of the CLIP regex `[\p{L}]+ | [\p{N}] | [^\s\p{L}\p{N}]+` (IGNORECASE) a character is in.
enum RegexClass : uint8_t { kRegexNone = 0, kRegexLetter = 1, kRegexNumber = 2, kRegexOther = 3 };

/// `props` holds from `first` up to the next run's `first`; runs are sorted and start at 0.
struct PropRun {
  uint32_t first;
  uint8_t props;
};

/// str.lower() of a code point that lowercases to one other code point.
struct LowercaseEntry {
  uint32_t cp;
  uint32_t lower;
};

/// str.lower() of a code point that lowercases to several (0-terminated when fewer than 3).
struct LowercaseMultiEntry {
  uint32_t cp;
  uint32_t lower[3];
};

/// Canonical combining class `ccc` for code points `first..last`; absent means 0.
struct CombiningClassRun {
  uint32_t first;
  uint32_t last;
  uint8_t ccc;
};

/// One level of canonical decomposition, `second` 0 for singletons. `composes` is
/// set when NFC composes (first, second) back into `cp` (a primary composite).
struct DecompositionEntry {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
  uint8_t composes;
};

/// The tables and their lengths, as the generator wrote them.
extern const PropRun kPropRuns[];
extern const size_t kPropRunCount;
extern const LowercaseEntry kLowercase[];  ///< sorted by cp
extern const size_t kLowercaseCount;
extern const LowercaseMultiEntry kLowercaseMulti[];  ///< sorted by cp
extern const size_t kLowercaseMultiCount;
extern const CombiningClassRun kCombiningClass[];  ///< sorted
extern const size_t kCombiningClassCount;
extern const DecompositionEntry kDecomposition[];  ///< sorted by cp; Hangul syllables are algorithmic
extern const size_t kDecompositionCount;

}  // namespace dpinfer::pipeline::unicode

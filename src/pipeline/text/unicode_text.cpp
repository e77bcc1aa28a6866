#include "unicode_text.h"

#include <algorithm>
#include <array>

#include "qwen2_unicode_tables.h"
#include "unicode_tables.h"

namespace dpinfer::pipeline::unicode {
namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;
constexpr char32_t kCapitalSigma = 0x3A3, kSmallSigma = 0x3C3, kFinalSigma = 0x3C2;

// Ref: transformers/models/clip/tokenization_clip.py BasicTokenizer._is_chinese_char
bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

uint8_t props_by_search(char32_t cp) {
  const PropRun* end = kPropRuns + kPropRunCount;
  const PropRun* it = std::upper_bound(kPropRuns, end, cp, [](char32_t c, const PropRun& r) { return c < r.first; });
  return (it - 1)->props;
}

// Most text is in the BMP, so it gets a flat table.
const std::array<uint8_t, 0x10000>& bmp_props() {
  static const std::array<uint8_t, 0x10000> table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (size_t i = 0; i < kPropRunCount; ++i) {
      uint32_t first = kPropRuns[i].first;
      if (first >= 0x10000) break;
      uint32_t last = i + 1 < kPropRunCount ? std::min<uint32_t>(kPropRuns[i + 1].first, 0x10000) : 0x10000;
      std::fill(t.begin() + first, t.begin() + last, kPropRuns[i].props);
    }
    return t;
  }();
  return table;
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningClassRun* end = kCombiningClass + kCombiningClassCount;
  const CombiningClassRun* it =
      std::upper_bound(kCombiningClass, end, cp, [](char32_t c, const CombiningClassRun& r) { return c < r.first; });
  if (it == kCombiningClass) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

// Which code points an NFC leaves alone: none for Python's, kFastNfcInert for tokenizers'.
using InertFn = bool (*)(char32_t);

bool never_inert(char32_t) { return false; }

bool fast_nfc_inert(char32_t cp) {
  if (cp < kFastNfcInert[0].first) return false;
  const CodePointRange* end = kFastNfcInert + kFastNfcInertCount;
  const CodePointRange* it =
      std::upper_bound(kFastNfcInert, end, cp, [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != kFastNfcInert && cp <= (it - 1)->last;
}

const DecompositionEntry* find_decomposition(char32_t cp) {
  if (cp < 0xC0) return nullptr;
  const DecompositionEntry* end = kDecomposition + kDecompositionCount;
  const DecompositionEntry* it =
      std::lower_bound(kDecomposition, end, cp, [](const DecompositionEntry& e, char32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(char32_t cp, std::u32string& out, InertFn inert) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const DecompositionEntry* d = inert(cp) ? nullptr : find_decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out, inert);
  if (d->second != 0) decompose(d->second, out, inert);
}

const std::vector<std::pair<uint64_t, char32_t>>& composition_pairs() {
  static const std::vector<std::pair<uint64_t, char32_t>> pairs = [] {
    std::vector<std::pair<uint64_t, char32_t>> p;
    for (size_t i = 0; i < kDecompositionCount; ++i) {
      const DecompositionEntry& e = kDecomposition[i];
      if (e.composes) p.emplace_back((uint64_t(e.first) << 32) | e.second, e.cp);
    }
    std::sort(p.begin(), p.end());
    return p;
  }();
  return pairs;
}

// Returns 0 when (a, b) has no primary composite.
char32_t compose_pair(char32_t a, char32_t b, InertFn inert) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto& pairs = composition_pairs();
  uint64_t key = (uint64_t(a) << 32) | b;
  auto it = std::lower_bound(pairs.begin(), pairs.end(), key,
                             [](const std::pair<uint64_t, char32_t>& p, uint64_t k) { return p.first < k; });
  char32_t composite = it != pairs.end() && it->first == key ? it->second : 0;
  return composite != 0 && !inert(a) && !inert(b) && !inert(composite) ? composite : 0;
}

bool all_ascii(std::u32string_view text) {
  return std::all_of(text.begin(), text.end(), [](char32_t c) { return c < 0x80; });
}

bool is_final_sigma(std::u32string_view text, size_t i) {
  // Ref: CPython Objects/unicodeobject.c handle_capital_sigma
  size_t j = i;
  while (j > 0 && (props(text[j - 1]) & kCaseIgnorable)) --j;
  if (j == 0 || !(props(text[j - 1]) & kCased)) return false;
  j = i + 1;
  while (j < text.size() && (props(text[j]) & kCaseIgnorable)) ++j;
  return j == text.size() || !(props(text[j]) & kCased);
}

void append_lower(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  const LowercaseEntry* end = kLowercase + kLowercaseCount;
  const LowercaseEntry* it =
      std::lower_bound(kLowercase, end, cp, [](const LowercaseEntry& e, char32_t c) { return e.cp < c; });
  if (it != end && it->cp == cp) {
    out.push_back(it->lower);
    return;
  }
  for (size_t i = 0; i < kLowercaseMultiCount; ++i) {
    if (kLowercaseMulti[i].cp != cp) continue;
    for (uint32_t c : kLowercaseMulti[i].lower) {
      if (c != 0) out.push_back(c);
    }
    return;
  }
  out.push_back(cp);
}

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if (c < 0xE0) {
      out.push_back((char32_t(c & 0x1F) << 6) | (s[i + 1] & 0x3F));
      i += 2;
    } else if (c < 0xF0) {
      out.push_back((char32_t(c & 0x0F) << 12) | (char32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
      i += 3;
    } else {
      out.push_back((char32_t(c & 0x07) << 18) | (char32_t(s[i + 1] & 0x3F) << 12) |
                    (char32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F));
      i += 4;
    }
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

uint8_t props(char32_t cp) { return cp < 0x10000 ? bmp_props()[cp] : props_by_search(cp); }

bool is_python_space(char32_t cp) {
  return (props(cp) & kSeparator) || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85;
}

static std::u32string nfc_with(std::u32string_view text, InertFn inert) {
  auto ccc_of = [inert](char32_t cp) -> uint8_t { return inert(cp) ? 0 : combining_class(cp); };
  std::u32string d;
  d.reserve(text.size() + 8);
  for (char32_t cp : text) decompose(cp, d, inert);

  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [&](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }

  // Canonical composition. Everything after the last starter is a non-starter in
  // canonical order, so a mark is blocked exactly when the mark before it has a
  // combining class that is not lower.
  std::u32string out;
  out.reserve(d.size());
  size_t starter = std::u32string::npos;
  uint8_t last_ccc = 0;
  for (char32_t cp : d) {
    uint8_t ccc = ccc_of(cp);
    if (starter != std::u32string::npos) {
      bool adjacent = starter == out.size() - 1;
      if (adjacent || (last_ccc != 0 && last_ccc < ccc)) {
        char32_t composite = compose_pair(out[starter], cp, inert);
        if (composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    last_ccc = ccc;
    out.push_back(cp);
  }
  return out;
}

std::u32string nfc(std::u32string_view text) { return nfc_with(text, never_inert); }

std::u32string nfc_tokenizers(std::u32string_view text) { return nfc_with(text, fast_nfc_inert); }

uint8_t qwen_class(char32_t cp) {
  static const std::array<uint8_t, 0x10000> bmp = [] {
    std::array<uint8_t, 0x10000> t{};
    for (size_t i = 0; i < kQwenClassRunCount; ++i) {
      uint32_t first = kQwenClassRuns[i].first;
      if (first >= 0x10000) break;
      uint32_t last = i + 1 < kQwenClassRunCount ? std::min<uint32_t>(kQwenClassRuns[i + 1].first, 0x10000) : 0x10000;
      std::fill(t.begin() + first, t.begin() + last, kQwenClassRuns[i].cls);
    }
    return t;
  }();
  if (cp < 0x10000) return bmp[cp];
  const QwenClassRun* end = kQwenClassRuns + kQwenClassRunCount;
  const QwenClassRun* it =
      std::upper_bound(kQwenClassRuns, end, cp, [](char32_t c, const QwenClassRun& r) { return c < r.first; });
  return (it - 1)->cls;
}

std::u32string lower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == kCapitalSigma) {
      out.push_back(is_final_sigma(text, i) ? kFinalSigma : kSmallSigma);
    } else {
      append_lower(text[i], out);
    }
  }
  return out;
}

std::vector<std::u32string> basic_tokenize(std::u32string_view text) {
  // Ref: transformers/models/clip/tokenization_clip.py BasicTokenizer.tokenize.
  // _clean_text, _tokenize_chinese_chars, NFC, split and lower() in that order.
  // Separators are starters that never compose, so NFC of each word equals NFC
  // of the whole text split afterwards; neither NFC nor lower() creates one.
  std::vector<std::u32string> words;
  std::u32string word;
  auto flush = [&] {
    if (word.empty()) return;
    std::u32string w = all_ascii(word) ? word : nfc(word);
    words.push_back(lower(w));
    word.clear();
  };
  for (char32_t cp : text) {
    uint8_t p = props(cp);
    if (p & kDrop) continue;
    if ((p & kSeparator) || is_cjk_ideograph(cp)) {
      flush();
      if (!(p & kSeparator)) {
        word.push_back(cp);
        flush();
      }
      continue;
    }
    word.push_back(cp);
  }
  flush();
  return words;
}

}  // namespace dpinfer::pipeline::unicode

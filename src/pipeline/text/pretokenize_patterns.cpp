// Ref: transformers/models/qwen2/tokenization_qwen2.py (PRETOKENIZE_REGEX),
//      transformers/integrations/mistral.py (MistralConverter's default pattern).
#include "pretokenize_patterns.h"

#include "qwen2_unicode_tables.h"
#include "unicode_text.h"

namespace dpinfer::pipeline::unicode {
namespace {

bool is_cr_or_lf(char32_t c) { return c == '\r' || c == '\n'; }

}  // namespace

size_t match_gpt4_style(std::u32string_view t, size_t i, size_t max_digits) {
  const size_t n = t.size();
  auto cls = [&](size_t k) { return qwen_class(t[k]); };
  const char32_t c = t[i];
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): case-insensitive, and s also matches U+017F (long s).
  if (c == '\'' && i + 1 < n) {
    auto is = [&](size_t k, char lower) {
      return k < n && (t[k] == char32_t(lower) || t[k] == char32_t(lower - 32) || (lower == 's' && t[k] == 0x17F));
    };
    if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return 2;
    if ((is(i + 1, 'r') || is(i + 1, 'v')) && is(i + 2, 'e')) return 3;
    if (is(i + 1, 'l') && is(i + 2, 'l')) return 3;
  }
  const uint8_t k0 = cls(i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t letters_from = n;
  if (k0 == kQwenLetter) {
    letters_from = i;
  } else if (k0 != kQwenNumber && !is_cr_or_lf(c) && i + 1 < n && cls(i + 1) == kQwenLetter) {
    letters_from = i + 1;
  }
  if (letters_from < n) {
    size_t j = letters_from + 1;
    while (j < n && cls(j) == kQwenLetter) ++j;
    return j - i;
  }
  // \p{N}{1,max_digits}
  if (k0 == kQwenNumber) {
    size_t j = i + 1;
    while (j < n && j - i < max_digits && cls(j) == kQwenNumber) ++j;
    return j - i;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t others_from = k0 == kQwenOther ? i : (c == ' ' && i + 1 < n && cls(i + 1) == kQwenOther) ? i + 1 : n;
  if (others_from < n) {
    size_t j = others_from + 1;
    while (j < n && cls(j) == kQwenOther) ++j;
    while (j < n && is_cr_or_lf(t[j])) ++j;
    return j - i;
  }
  // Only whitespace is left. \s*[\r\n]+ ends after the run's last \r or \n.
  size_t end = i + 1;
  while (end < n && cls(end) == kQwenSpace) ++end;
  for (size_t k = end; k > i; --k) {
    if (is_cr_or_lf(t[k - 1])) return k - i;
  }
  // \s+(?!\S), else \s+: the run, less its last character when a non-space follows it.
  if (end < n && end - i >= 2) return end - 1 - i;
  return end - i;
}

}  // namespace dpinfer::pipeline::unicode

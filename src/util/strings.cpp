#include "dpinfer/util/strings.h"

#include <cstdint>
#include <cstdio>

namespace dpinfer {
namespace {

/// The length of the valid UTF-8 sequence starting at `s[i]`, or 0 when there is none.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b = byte(i);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  // Overlong forms, surrogates and code points past U+10FFFF are not valid UTF-8.
  if (n == 2 && b < 0xC2) return 0;
  if (n == 3 && ((b == 0xE0 && byte(i + 1) < 0xA0) || (b == 0xED && byte(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((b == 0xF0 && byte(i + 1) < 0x90) || b > 0xF4 || (b == 0xF4 && byte(i + 1) >= 0x90))) return 0;
  return n;
}

std::string hex_escape(uint8_t b) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02X", b);
  return buf;
}

/// The code point of the valid `n`-byte UTF-8 sequence at `s[i]`.
uint32_t code_point(std::string_view s, size_t i, size_t n) {
  const auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  if (n == 1) return byte(0);
  uint32_t cp = byte(0) & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  return cp;
}

/// Format characters that move or reorder the text around them on a terminal: the
/// line and paragraph separators, and the bidirectional marks, embeddings, overrides
/// and isolates ("Trojan Source", CVE-2021-42574).
bool is_layout_control(uint32_t cp) {
  return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::string join_limited(const std::vector<std::string>& items, size_t limit) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > limit) out += ", and " + std::to_string(items.size() - limit) + " more";
  return out;
}

std::string printable(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (out.size() >= max_bytes) return out + "...";
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b == '\n') {
      out += "\\n";
      ++i;
    } else if (b == '\t') {
      out += "\\t";
      ++i;
    } else if (b < 0x20 || b == 0x7F) {
      out += hex_escape(b);
      ++i;
    } else if (size_t n = utf8_sequence(text, i); n == 0) {
      out += hex_escape(b);
      ++i;
    } else if (n == 2 && b == 0xC2 && static_cast<uint8_t>(text[i + 1]) < 0xA0) {
      out += hex_escape(static_cast<uint8_t>(text[i + 1]));  // a C1 control, U+0080..U+009F
      i += 2;
    } else if (const uint32_t cp = code_point(text, i, n); is_layout_control(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
      out += buf;
      i += n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string quote(std::string_view text, size_t max_bytes) { return "'" + printable(text, max_bytes) + "'"; }

}  // namespace dpinfer

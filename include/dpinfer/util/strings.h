#pragma once
// String helpers for messages: joining lists, and quoting untrusted text.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dpinfer {

/// Whether `s` begins with `prefix` (C++20's starts_with).
inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

/// Whether `s` ends with `suffix` (C++20's ends_with).
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// `items` separated by `separator`: join({"a", "b"}) is "a, b".
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

/// The first `limit` of `items`, then ", and N more" when there are more:
/// for messages that list what a file holds, which may be thousands of entries.
std::string join_limited(const std::vector<std::string>& items, size_t limit);

/// `text` made safe to print inside a one-line message: control characters (newlines,
/// ESC and the rest of C0, DEL, C1) become \n, \t, \xHH escapes, invalid UTF-8 bytes
/// become \xHH, the line separators and bidirectional controls (U+061C, U+200E,
/// U+200F, U+2028..U+202E, U+2066..U+2069) become \uXXXX, and text whose escaped
/// form is longer than `max_bytes` is cut at a character boundary with "..." after it. A file or a model can so never clear the screen, set the window
/// title or fill the terminal through an error message.
std::string printable(std::string_view text, size_t max_bytes = 200);

/// "'" + printable(text, max_bytes) + "'".
std::string quote(std::string_view text, size_t max_bytes = 200);

}  // namespace dpinfer

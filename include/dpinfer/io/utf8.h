#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dpinfer::io {

/// Byte offset of the first invalid UTF-8 sequence in `s`, or npos when `s` is valid
/// (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t find_invalid_utf8(std::string_view s);

/// True when every code point of the valid UTF-8 string `s` is below U+0100 (Latin-1).
bool is_latin1(std::string_view s);

/// `s` (valid UTF-8, Latin-1 only) re-encoded as Latin-1 bytes.
std::string to_latin1(std::string_view s);

/// The longest prefix of `s` of at most `max_bytes` bytes that does not end inside a UTF-8
/// sequence, for cutting text short in a message without leaving half a character (and
/// so invalid UTF-8) at the end. Only continuation bytes are looked at: a valid `s` gives a
/// valid prefix.
std::string_view utf8_prefix(std::string_view s, size_t max_bytes);

}  // namespace dpinfer::io

#pragma once
// The text side of the CLIP and Qwen2 tokenizers: UTF-8, the cleanup transformers' slow
// CLIPTokenizer does without ftfy, with Python's exact Unicode behaviour, and the NFC and
// character classes of Qwen2TokenizerFast.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dpinfer::pipeline::unicode {

/// Decodes `text`, which must be valid UTF-8 (see dpinfer::io::find_invalid_utf8).
std::u32string decode_utf8(std::string_view text);

/// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(char32_t cp, std::string& out);

/// The PropBits of `cp`.
uint8_t props(char32_t cp);

/// Python's str.isspace(): the separators, and the control characters BasicTokenizer
/// drops that Python still calls whitespace (str.strip() strips these).
bool is_python_space(char32_t cp);

/// unicodedata.normalize("NFC", text) of Python 3.11 (Unicode 14.0).
std::u32string nfc(std::u32string_view text);

/// NFC as tokenizers 0.22's NFC normalizer (Qwen2TokenizerFast's) computes it: nfc() with
/// the code points its older Unicode data lacks (kFastNfcInert) left inert, as starters
/// that never compose.
std::u32string nfc_tokenizers(std::u32string_view text);

/// The QwenClass (qwen2_unicode_tables.h) of `cp`.
uint8_t qwen_class(char32_t cp);

/// str.lower() of Python 3.11, final sigma included.
std::u32string lower(std::u32string_view text);

/// transformers' BasicTokenizer(strip_accents=False, do_split_on_punc=False).tokenize:
/// control characters dropped, CJK ideographs spaced out, NFC, split on whitespace,
/// each word lowercased. Returns the words, none empty.
std::vector<std::u32string> basic_tokenize(std::u32string_view text);

}  // namespace dpinfer::pipeline::unicode

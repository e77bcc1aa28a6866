#include "dpinfer/io/exif.h"

#include <cstdint>

#include "big_endian.h"

namespace dpinfer::io {
namespace {

using big_endian::put_u16;
using big_endian::put_u32;

/// UTF-16BE of valid UTF-8 `s` (a code point above U+FFFF as a surrogate pair).
std::string utf16be(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += n;
    if (cp < 0x10000) {
      put_u16(out, cp);
    } else {
      cp -= 0x10000;
      put_u16(out, 0xD800 + (cp >> 10));
      put_u16(out, 0xDC00 + (cp & 0x3FF));
    }
  }
  return out;
}

}  // namespace

/// Big-endian TIFF: IFD0 with one entry (the Exif IFD's offset), then the Exif IFD with one
/// entry (UserComment, type UNDEFINED), then the comment's bytes.
std::string exif_user_comment_tiff(const std::string& text) {
  const std::string value = std::string("UNICODE\0", 8) + utf16be(text);
  constexpr uint32_t kIfd0 = 8;                      // right after the TIFF header
  constexpr uint32_t kExifIfd = kIfd0 + 2 + 12 + 4;  // count, one entry, next-IFD offset
  constexpr uint32_t kValue = kExifIfd + 2 + 12 + 4;
  std::string p = "MM";
  put_u16(p, 42);
  put_u32(p, kIfd0);
  put_u16(p, 1);                  // IFD0: one entry
  put_u16(p, 0x8769);             // ExifIFDPointer
  put_u16(p, 4);                  // LONG
  put_u32(p, 1);
  put_u32(p, kExifIfd);
  put_u32(p, 0);                  // no IFD1
  put_u16(p, 1);                  // Exif IFD: one entry
  put_u16(p, 0x9286);             // UserComment
  put_u16(p, 7);                  // UNDEFINED
  put_u32(p, static_cast<uint32_t>(value.size()));
  put_u32(p, kValue);
  put_u32(p, 0);
  return p + value;
}

}  // namespace dpinfer::io

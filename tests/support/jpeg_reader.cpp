#include "support/jpeg_reader.h"

#include <fstream>
#include <iterator>
#include <stdexcept>

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_JPEG
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace dpinfer::test {
namespace {

uint32_t be(const std::string& s, size_t at, int bytes) {
  if (at + bytes > s.size()) throw std::runtime_error("jpeg: truncated metadata");
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// The value of tag `tag` in the big-endian TIFF IFD at `ifd` of `tiff`, as (count, offset-or-value).
bool find_tag(const std::string& tiff, uint32_t ifd, uint16_t tag, uint32_t* count, uint32_t* value) {
  const uint32_t n = be(tiff, ifd, 2);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (be(tiff, e, 2) != tag) continue;
    *count = be(tiff, e + 4, 4);
    *value = be(tiff, e + 8, 4);
    return true;
  }
  return false;
}

void read_exif(const std::string& app1, DecodedJpeg* out) {
  if (app1.compare(0, 6, std::string("Exif\0\0", 6)) != 0) return;
  const std::string tiff = app1.substr(6);
  if (tiff.compare(0, 2, "MM") != 0 || be(tiff, 2, 2) != 42) throw std::runtime_error("jpeg: not big-endian TIFF");
  uint32_t count = 0, exif_ifd = 0, offset = 0;
  if (!find_tag(tiff, be(tiff, 4, 4), 0x8769, &count, &exif_ifd)) return;
  if (!find_tag(tiff, exif_ifd, 0x9286, &count, &offset)) return;
  if (count < 8 || offset + count > tiff.size()) throw std::runtime_error("jpeg: bad UserComment");
  out->user_comment_prefix = tiff.substr(offset, 8);
  for (uint32_t at = offset + 8; at + 1 < offset + count; at += 2) {
    uint32_t cp = be(tiff, at, 2);
    if (cp >= 0xD800 && cp < 0xDC00) {
      at += 2;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (be(tiff, at, 2) - 0xDC00);
    }
    append_utf8(out->user_comment, cp);
  }
}

}  // namespace

DecodedJpeg read_jpeg(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  DecodedJpeg out;
  int channels = 0;
  unsigned char* px = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()),
                                            &out.width, &out.height, &channels, 3);
  if (!px) throw std::runtime_error("jpeg: stb_image rejects " + path + ": " + stbi_failure_reason());
  out.pixels.assign(px, px + static_cast<size_t>(out.width) * out.height * 3);
  stbi_image_free(px);
  if (be(bytes, 0, 2) != 0xFFD8) throw std::runtime_error("jpeg: no SOI");
  for (size_t at = 2; at + 4 <= bytes.size();) {
    if (static_cast<uint8_t>(bytes[at]) != 0xFF) throw std::runtime_error("jpeg: expected a marker");
    const uint8_t marker = static_cast<uint8_t>(bytes[at + 1]);
    if (marker == 0xDA) break;  // start of scan: no metadata after it
    const uint32_t len = be(bytes, at + 2, 2);
    const std::string data = bytes.substr(at + 4, len - 2);
    out.markers.push_back(marker);
    if (marker == 0xE1) read_exif(data, &out);
    if (marker == 0xFE) out.comment = data;
    at += 2 + len;
  }
  return out;
}

}  // namespace dpinfer::test

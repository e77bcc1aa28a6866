#include "dpinfer/io/png_writer.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "dpinfer/io/stb_image_write.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"

#include "big_endian.h"

namespace dpinfer::io {
namespace {

using big_endian::put_u32;

constexpr size_t kSignatureSize = 8;
constexpr size_t kIhdrChunkSize = 4 + 4 + 13 + 4;  // length, type, data, crc

void append_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  std::string typed = std::string(type, 4) + data;
  out += typed;
  put_u32(out, png_crc32(reinterpret_cast<const uint8_t*>(typed.data()), typed.size()));
}

std::string text_chunk_data(const PngText& t, bool* utf8) {
  if (t.keyword.empty() || t.keyword.size() > 79 || t.keyword.find('\0') != std::string::npos)
    throw Error("png text keyword '" + t.keyword + "' must be 1-79 characters without NUL");
  if (find_invalid_utf8(t.text) != std::string::npos) throw Error("png text '" + t.keyword + "' is not valid UTF-8");
  *utf8 = t.force_utf8 || !is_latin1(t.text);
  if (!*utf8) return t.keyword + '\0' + to_latin1(t.text);
  // iTXt: keyword, NUL, compression flag 0, method 0, empty language tag, NUL, empty translated keyword, NUL.
  return t.keyword + '\0' + '\0' + '\0' + '\0' + '\0' + t.text;
}

}  // namespace

uint32_t png_crc32(const uint8_t* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string encode_png(const uint8_t* rgb, int width, int height, const std::vector<PngText>& texts) {
  if (width <= 0 || height <= 0 || width > 65536 || height > 65536)
    throw Error("cannot write a " + std::to_string(width) + "x" + std::to_string(height) + " png");
  int len = 0;
  unsigned char* png = stbi_write_png_to_mem(rgb, width * 3, width, height, 3, &len);
  if (!png || len < static_cast<int>(kSignatureSize + kIhdrChunkSize)) {
    std::free(png);
    throw Error("png encoding failed (out of memory?)");
  }
  std::string plain(reinterpret_cast<const char*>(png), static_cast<size_t>(len));
  std::free(png);
  std::string out = plain.substr(0, kSignatureSize + kIhdrChunkSize);
  for (const PngText& t : texts) {
    bool utf8 = false;
    std::string data = text_chunk_data(t, &utf8);
    append_chunk(out, utf8 ? "iTXt" : "tEXt", data);
  }
  out.append(plain, kSignatureSize + kIhdrChunkSize, std::string::npos);
  return out;
}

}  // namespace dpinfer::io

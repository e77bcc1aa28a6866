#pragma once
// 8-bit RGB PNGs with text metadata. Pixels are encoded by stb_image_write; the
// text chunks are spliced in after IHDR (PNG spec §5.6 allows them before IDAT).

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::io {

/// One text chunk. Written as tEXt when `text` is Latin-1, as iTXt (UTF-8,
/// uncompressed) otherwise, or always as iTXt when `force_utf8`.
struct PngText {
  std::string keyword;  ///< 1–79 Latin-1 characters, e.g. "parameters"
  std::string text;     ///< UTF-8
  bool force_utf8 = false;
};

/// Encodes `rgb` (height × width × 3 bytes, row-major) as a PNG with the chunks.
/// Throws Error when the size or a keyword is invalid.
std::string encode_png(const uint8_t* rgb, int width, int height, const std::vector<PngText>& texts);

/// CRC-32 as PNG chunks use it (ISO 3309, polynomial 0xEDB88320).
uint32_t png_crc32(const uint8_t* data, size_t size, uint32_t crc = 0);

}  // namespace dpinfer::io

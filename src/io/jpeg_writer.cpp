#include "dpinfer/io/jpeg_writer.h"

#include "dpinfer/io/exif.h"
#include "dpinfer/io/stb_image_write.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"

#include "big_endian.h"

namespace dpinfer::io {
namespace {

using big_endian::put_u16;

constexpr size_t kMaxSegmentData = 65533;  // a segment's 16-bit length counts itself (2 bytes)

/// An APP1 Exif payload: "Exif\0\0", then the TIFF block.
std::string exif_user_comment(const std::string& text) { return std::string("Exif\0\0", 6) + exif_user_comment_tiff(text); }

/// Marker 0xFF `marker`, then the 16-bit length and `data`; false when `data` is too long.
bool append_segment(std::string& out, uint8_t marker, const std::string& data) {
  if (data.size() > kMaxSegmentData) return false;
  out.push_back(static_cast<char>(0xFF));
  out.push_back(static_cast<char>(marker));
  put_u16(out, static_cast<uint32_t>(data.size() + 2));
  out += data;
  return true;
}

void append_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

}  // namespace

EncodedJpeg encode_jpeg(const uint8_t* rgb, int width, int height, int quality, const JpegText& text) {
  // stb writes a JPEG's sizes in 16 bits.
  if (width <= 0 || height <= 0 || width > 65535 || height > 65535)
    throw Error("jpeg size " + std::to_string(width) + "x" + std::to_string(height) + " is out of range 1..65535");
  if (quality < 1 || quality > 100) throw Error("jpeg quality " + std::to_string(quality) + " is out of range 1..100");
  for (const std::string* t : {&text.user_comment, &text.comment})
    if (find_invalid_utf8(*t) != std::string::npos) throw Error("jpeg text is not valid UTF-8");
  std::string pixels;
  if (!stbi_write_jpg_to_func(append_bytes, &pixels, width, height, 3, rgb, quality) || pixels.size() < 4 ||
      static_cast<uint8_t>(pixels[0]) != 0xFF || static_cast<uint8_t>(pixels[1]) != 0xD8)
    throw Error("jpeg encoding failed");
  // After SOI and stb's APP0 (JFIF requires it first), before the tables.
  size_t head = 2;
  if (static_cast<uint8_t>(pixels[2]) == 0xFF && static_cast<uint8_t>(pixels[3]) == 0xE0 && pixels.size() > 6)
    head = 4 + ((static_cast<size_t>(static_cast<uint8_t>(pixels[4])) << 8) | static_cast<uint8_t>(pixels[5]));
  EncodedJpeg out;
  out.bytes = pixels.substr(0, head);
  if (!text.user_comment.empty())
    out.user_comment_left_out = !append_segment(out.bytes, 0xE1, exif_user_comment(text.user_comment));
  if (!text.comment.empty()) out.comment_left_out = !append_segment(out.bytes, 0xFE, text.comment);
  out.bytes.append(pixels, head, std::string::npos);
  return out;
}

}  // namespace dpinfer::io

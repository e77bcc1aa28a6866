#pragma once
// Baseline JPEGs with metadata (--image-format jpeg): for datasets where smaller files matter
// more than exact pixels. Pixels are encoded by stb_image_write (baseline,
// 4:2:0 chroma subsampling at quality 90 and below, none above); two segments are spliced in
// after SOI and stb's JFIF APP0:
//  - APP1 Exif with one tag, UserComment (0x9286), "UNICODE\0" + UTF-16BE text: where
//    AUTOMATIC1111 writes and reads its infotext in a JPEG (modules/images.py, piexif's
//    UserComment helper, whose "unicode" is big-endian UTF-16);
//  - COM with UTF-8 text (PIL's info["comment"]): dpinfer's record as JSON.
// A segment holds at most 65,533 bytes; a text too long for one is left out of the file
// (the manifests keep it), and the result says so.

#include <cstdint>
#include <string>

namespace dpinfer::io {

struct JpegText {
  std::string user_comment;  ///< UTF-8; written as Exif UserComment (UTF-16BE); empty: no APP1
  std::string comment;       ///< UTF-8; written as a COM segment; empty: none
};

struct EncodedJpeg {
  std::string bytes;
  bool user_comment_left_out = false;  ///< too long for one APP1 segment
  bool comment_left_out = false;       ///< too long for one COM segment
};

/// Encodes `rgb` (height × width × 3 bytes, row-major) at `quality` (1–100) with `text`.
/// Throws Error when the size or quality is out of range or a text is not valid UTF-8.
EncodedJpeg encode_jpeg(const uint8_t* rgb, int width, int height, int quality, const JpegText& text);

}  // namespace dpinfer::io

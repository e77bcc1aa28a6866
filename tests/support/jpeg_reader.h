#pragma once
// JPEGs read back by a reader independent of the writer under test: stb_image decodes the
// pixels, and the metadata segments are walked here (APP1 Exif's UserComment, COM).

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::test {

struct DecodedJpeg {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;         ///< RGB rows
  std::vector<uint8_t> markers;        ///< the segments before the scan, in order (0xE0 APP0, 0xE1 APP1, 0xFE COM, ...)
  std::string user_comment_prefix;     ///< the 8-byte character code of Exif UserComment ("UNICODE\0")
  std::string user_comment;            ///< its text, UTF-16BE converted to UTF-8; empty without one
  std::string comment;                 ///< the COM segment's bytes; empty without one
};

/// Decodes `path`; throws std::runtime_error on a JPEG stb_image rejects or a malformed segment.
DecodedJpeg read_jpeg(const std::string& path);

}  // namespace dpinfer::test

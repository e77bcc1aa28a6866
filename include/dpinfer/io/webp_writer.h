#pragma once
// WebP images with metadata (--image-format webp): lossy at a quality, or lossless, for
// datasets that want smaller files than PNG. Pixels go through libwebp's advanced API
// (Debian's libwebp-dev; method 4, its default, the speed/size balance Pillow uses too),
// and libwebpmux adds two chunks to an extended (VP8X) file:
//  - EXIF: the TIFF block with UserComment (io/exif.h), where AUTOMATIC1111 reads an infotext
//    from a WebP as from a JPEG;
//  - "XMP ": an XMP packet whose dpinfer:record property holds dpinfer's record as JSON
//    (XML-escaped). Pillow shows them as info["exif"] and info["xmp"].
// A chunk may hold up to 4 GiB, so unlike in a JPEG no text is ever left out.

#include <cstdint>
#include <string>

namespace dpinfer::io {

struct WebpText {
  std::string user_comment;  ///< UTF-8; the EXIF chunk's UserComment; empty: no EXIF chunk
  std::string record;        ///< UTF-8; the XMP chunk's dpinfer:record; empty: no XMP chunk
};

/// The XMP packet that holds `record` (exposed for the tests, which read it back).
std::string xmp_packet_with_record(const std::string& record);

/// Encodes `rgb` (height × width × 3 bytes, row-major), lossless or lossy at `quality`
/// (0–100), with `text`. Throws Error when the size or quality is out of range (WebP holds
/// at most 16383 × 16383), a text is not valid UTF-8, or libwebp fails.
std::string encode_webp(const uint8_t* rgb, int width, int height, int quality, bool lossless, const WebpText& text);

}  // namespace dpinfer::io

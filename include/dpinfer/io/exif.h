#pragma once
// The Exif block that carries AUTOMATIC1111's infotext, for JPEG (an APP1 segment) and WebP
// (an EXIF chunk): a big-endian TIFF with one tag, UserComment (0x9286), "UNICODE\0" +
// UTF-16BE text, where A1111 writes and reads it (modules/images.py, piexif's UserComment
// helper, whose "unicode" is big-endian UTF-16).

#include <string>

namespace dpinfer::io {

/// The TIFF block ("MM", IFD0 pointing at the Exif IFD, UserComment) for valid UTF-8
/// `text`. JPEG's APP1 puts "Exif\0\0" before it; WebP's EXIF chunk holds it as it is.
std::string exif_user_comment_tiff(const std::string& text);

}  // namespace dpinfer::io

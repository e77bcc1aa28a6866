#pragma once
// Big-endian integers appended to a byte string: PNG chunk lengths and CRCs, JPEG segment
// lengths, and the TIFF block of an Exif payload (written "MM", big-endian). Private to src/io.

#include <cstdint>
#include <string>

namespace dpinfer::io::big_endian {

inline void put_u16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>((v >> 8) & 0xFF));
  out.push_back(static_cast<char>(v & 0xFF));
}

inline void put_u32(std::string& out, uint32_t v) {
  put_u16(out, v >> 16);
  put_u16(out, v & 0xFFFF);
}

}  // namespace dpinfer::io::big_endian

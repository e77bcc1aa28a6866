// stb_image's implementation, compiled into this file alone, with its warnings off; PNG only:
// JPEG goes through libjpeg-turbo (Pillow's decoder, whose pixels stb_image's own IDCT and
// upsampling do not match) and WebP through libwebp.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC  // private to this file: the tests compile their own copy of stb_image
#define STBI_ONLY_PNG
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <csetjmp>
#include <cstdio>
#include <memory>
#include <optional>

#include <jpeglib.h>
#include <webp/decode.h>

#include "dpinfer/io/image_reader.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

/// The largest input file read: a 16384^2 PNG of noise is under 1 GiB.
constexpr uintmax_t kMaxImageFileBytes = uintmax_t{1} << 30;

/// A decoder's own message, which may quote bytes of the file (stb_image names an unknown chunk by its
/// four bytes): escaped and cut short, so that it stays one printable line. stb_image gives none for
/// some failures (null).
std::string library_message(const char* message) { return message ? printable(message, 120) : "no reason given"; }

bool starts_with_bytes(const std::string& bytes, const char* magic, size_t n, size_t at = 0) {
  return bytes.size() >= at + n && bytes.compare(at, n, magic, n) == 0;
}

void check_pixels(int64_t width, int64_t height, const std::string& name, int64_t max_pixels) {
  if (width <= 0 || height <= 0)
    throw InputError(quote(name) + ": the image has no pixels (" + std::to_string(width) + "x" +
                     std::to_string(height) + ")");
  if (width > max_pixels / height)  // width * height > max_pixels, without overflowing for a forged 2^32 x 2^32
    throw InputError(quote(name) + ": the image is " + std::to_string(width) + "x" + std::to_string(height) + ", more than the " +
                     std::to_string(max_pixels) + " pixels dpinfer reads; make it smaller");
}

/// Every chunk of the PNG in `bytes` lies inside it. stb_image grows its buffer to a chunk's claimed length
/// before reading the chunk, so a few forged bytes could ask it for gigabytes; after this walk, what it
/// allocates is bounded by the file's own size.
void check_png_chunks(const std::string& bytes, const std::string& name) {
  size_t at = 8;  // after the signature
  while (at + 8 <= bytes.size()) {
    uint64_t length = 0;
    for (size_t k = 0; k < 4; ++k) length = (length << 8) | static_cast<uint8_t>(bytes[at + k]);
    if (length > bytes.size() - at - 8 || bytes.size() - at - 8 - length < 4)  // data and CRC inside the file
      throw InputError(quote(name) + ": the PNG is truncated or corrupt (a chunk at byte " + std::to_string(at) +
                       " runs past the end of the file)");
    const bool end = bytes.compare(at + 4, 4, "IEND") == 0;
    at += 12 + length;
    if (end) return;
  }
  throw InputError(quote(name) + ": the PNG is truncated (no IEND chunk)");
}

/// The width and height in a PNG's IHDR chunk (the first, big-endian at bytes 16..23), checked against
/// `max_pixels`; nullopt when the chunk is not there.
std::optional<ImageDimensions> png_header_size(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  if (bytes.size() < 24 || bytes.compare(12, 4, "IHDR") != 0) return std::nullopt;
  const auto be32 = [&bytes](size_t at) {
    int64_t v = 0;
    for (size_t k = 0; k < 4; ++k) v = (v << 8) | static_cast<uint8_t>(bytes[at + k]);
    return v;
  };
  check_pixels(be32(16), be32(20), name, max_pixels);
  return ImageDimensions{static_cast<int>(be32(16)), static_cast<int>(be32(20))};
}

RgbImageData decode_png(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int size = static_cast<int>(bytes.size());
  // The size from the IHDR chunk first: a huge one is refused by its own message, before stb_image's generic one.
  png_header_size(bytes, name, max_pixels);
  check_png_chunks(bytes, name);
  int w = 0, h = 0, channels = 0;
  if (!stbi_info_from_memory(data, size, &w, &h, &channels))
    throw InputError(quote(name) + ": not a readable PNG (" + library_message(stbi_failure_reason()) + ")");
  check_pixels(w, h, name, max_pixels);
  std::unique_ptr<stbi_uc, decltype(&stbi_image_free)> pixels(stbi_load_from_memory(data, size, &w, &h, &channels, 3),
                                                              &stbi_image_free);
  if (!pixels)
    throw InputError(quote(name) + ": the PNG is corrupt or truncated (" + library_message(stbi_failure_reason()) + ")");
  RgbImageData out;
  out.width = w;
  out.height = h;
  out.pixels.assign(pixels.get(), pixels.get() + static_cast<size_t>(w) * h * 3);
  return out;
}

/// libjpeg reports errors through error_exit, which must not return: it jumps back here.
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void jpeg_no_output(j_common_ptr, int) {}  // warnings (a corrupt marker Pillow also reads past) are not printed

/// Decodes into `out` (only its width and height with `header_only`); returns libjpeg's message on failure, empty
/// on success. No C++ object with a destructor lives in this frame across setjmp: `out` is the caller's.
std::string decode_jpeg_into(const std::string& bytes, int64_t max_pixels, RgbImageData& out, std::string& too_big,
                             bool header_only = false) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = jpeg_error_exit;
  errors.manager.emit_message = jpeg_no_output;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return errors.message;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return "a CMYK JPEG, which dpinfer does not convert to RGB; save it as RGB";
  }
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > max_pixels) {
    too_big = std::to_string(cinfo.image_width) + "x" + std::to_string(cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    return "too big";
  }
  if (header_only) {
    out.width = static_cast<int>(cinfo.image_width);  // what jpeg_start_decompress gives at scale 1
    out.height = static_cast<int>(cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    return {};
  }
  cinfo.out_color_space = JCS_RGB;  // YCbCr and grayscale both convert; Pillow's "RGB" rawmode
  jpeg_start_decompress(&cinfo);
  out.width = static_cast<int>(cinfo.output_width);
  out.height = static_cast<int>(cinfo.output_height);
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.pixels.data() + static_cast<size_t>(cinfo.output_scanline) * out.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return {};
}

RgbImageData decode_jpeg(const std::string& bytes, const std::string& name, int64_t max_pixels, bool header_only = false) {
  RgbImageData out;
  std::string too_big;
  const std::string failure = decode_jpeg_into(bytes, max_pixels, out, too_big, header_only);
  if (!too_big.empty())
    throw InputError(quote(name) + ": the image is " + too_big + ", more than the " + std::to_string(max_pixels) +
                     " pixels dpinfer reads; make it smaller");
  if (!failure.empty()) throw InputError(quote(name) + ": cannot decode the JPEG: " + library_message(failure.c_str()));
  return out;
}

RgbImageData decode_webp(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  int w = 0, h = 0;
  if (!WebPGetInfo(data, bytes.size(), &w, &h)) throw InputError(quote(name) + ": not a readable WebP file");
  check_pixels(w, h, name, max_pixels);
  RgbImageData out;
  out.width = w;
  out.height = h;
  out.pixels.resize(static_cast<size_t>(w) * h * 3);
  if (!WebPDecodeRGBInto(data, bytes.size(), out.pixels.data(), out.pixels.size(), w * 3))
    throw InputError(quote(name) + ": the WebP file is corrupt or truncated (or animated, which dpinfer does not read)");
  return out;
}

}  // namespace

RgbImageData decode_rgb_image(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  if (starts_with_bytes(bytes, "\x89PNG\r\n\x1a\n", 8)) return decode_png(bytes, name, max_pixels);
  if (starts_with_bytes(bytes, "\xFF\xD8\xFF", 3)) return decode_jpeg(bytes, name, max_pixels);
  if (starts_with_bytes(bytes, "RIFF", 4) && starts_with_bytes(bytes, "WEBP", 4, 8))
    return decode_webp(bytes, name, max_pixels);
  throw InputError(quote(name) + ": not a PNG, JPEG or WebP image; convert it to one of those");
}

ImageDimensions image_dimensions(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  if (starts_with_bytes(bytes, "\x89PNG\r\n\x1a\n", 8)) {
    if (const std::optional<ImageDimensions> size = png_header_size(bytes, name, max_pixels)) return *size;
    throw InputError(quote(name) + ": not a readable PNG (no IHDR chunk first)");
  }
  if (starts_with_bytes(bytes, "\xFF\xD8\xFF", 3)) {
    const RgbImageData header = decode_jpeg(bytes, name, max_pixels, /*header_only=*/true);
    check_pixels(header.width, header.height, name, max_pixels);
    return {header.width, header.height};
  }
  if (starts_with_bytes(bytes, "RIFF", 4) && starts_with_bytes(bytes, "WEBP", 4, 8)) {
    int w = 0, h = 0;
    if (!WebPGetInfo(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &w, &h))
      throw InputError(quote(name) + ": not a readable WebP file");
    check_pixels(w, h, name, max_pixels);
    return {w, h};
  }
  throw InputError(quote(name) + ": not a PNG, JPEG or WebP image; convert it to one of those");
}

std::string read_image_file(const std::string& path) {
  std::string bytes, why;
  if (read_whole_file(path, kMaxImageFileBytes, &bytes, &why) != ReadStatus::kOk)
    throw Error("cannot read the image " + quote(path) + ": " + why);
  return bytes;
}

RgbImageData read_rgb_image(const std::string& path) { return decode_rgb_image(read_image_file(path), path); }

}  // namespace dpinfer::io

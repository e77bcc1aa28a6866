#pragma once
// Decodes PNG, JPEG and WebP files into 8-bit RGB, as Pillow decodes them, so that an input image
// (an img2img item's `image`) gives the pixels diffusers' pipelines get from PIL.Image.open():
//  - PNG through stb_image (Debian's libstb-dev; its implementation compiled once, in
//    src/io/image_reader.cpp): lossless, so every decoder gives the same pixels;
//  - JPEG through libjpeg-turbo (Debian's libjpeg-dev), which Pillow wraps too, with Pillow's
//    settings: the libjpeg defaults (islow DCT, fancy upsampling), YCbCr and grayscale to RGB;
//  - WebP through libwebp (Debian's libwebp-dev), which Pillow wraps too.
// Grayscale and palette images become RGB, and an alpha channel is dropped (Pillow's
// convert("RGB")). Nothing here knows of models.

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::io {

struct RgbImageData {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  ///< height x width x 3, row-major
};

/// The most pixels an input image may have (16384 x 16384): a bigger one is refused before it is
/// decoded, so a hostile header cannot ask for gigabytes.
constexpr int64_t kMaxDecodedPixels = int64_t{16384} * 16384;

/// The image held in `bytes` (a file's whole content), recognised by its first bytes. Throws
/// InputError naming `name` (the file, for messages) for another format, a truncated or corrupt
/// file, a CMYK JPEG, or more than `max_pixels` pixels (read from the header, before any pixel
/// buffer is allocated).
RgbImageData decode_rgb_image(const std::string& bytes, const std::string& name,
                              int64_t max_pixels = kMaxDecodedPixels);

/// The width and height of the image held in `bytes`, read from its header alone (nothing is decoded), as
/// decode_rgb_image() would give them. Throws InputError as decode_rgb_image() does for another format, a header
/// that cannot be read, or more than `max_pixels` pixels.
struct ImageDimensions {
  int width = 0;
  int height = 0;
};
ImageDimensions image_dimensions(const std::string& bytes, const std::string& name,
                                 int64_t max_pixels = kMaxDecodedPixels);

/// The whole content of the image file at `path` (at most 1 GiB), undecoded: for a caller that
/// hashes the bytes it decodes (worker/input_images.h). Throws Error naming the file.
std::string read_image_file(const std::string& path);

/// The image at `path` as 8-bit RGB (decode_rgb_image of the file's content). Throws Error naming
/// the file when it cannot be read, InputError when it cannot be decoded.
RgbImageData read_rgb_image(const std::string& path);

}  // namespace dpinfer::io

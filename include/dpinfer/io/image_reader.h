#pragma once
// Reads PNG and JPEG files back into RGB pixels, with stb_image from Debian's libstb-dev (its
// implementation compiled once, in src/io/image_reader.cpp): for what dpinfer composes from
// images it wrote itself, such as DPG-Bench's 2x2 grids.

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::io {

struct RgbImageData {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  ///< height x width x 3, row-major
};

/// The image at `path` as 8-bit RGB. Throws Error naming the file when it cannot be read or decoded.
RgbImageData read_rgb_image(const std::string& path);

}  // namespace dpinfer::io

// stb_image's implementation, compiled into this file alone, with its warnings off; PNG and
// JPEG only (the formats dpinfer reads back).
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC  // private to this file: the tests compile their own copy of stb_image
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
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

#include <memory>

#include "dpinfer/io/image_reader.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {

RgbImageData read_rgb_image(const std::string& path) {
  int w = 0, h = 0, channels = 0;
  std::unique_ptr<stbi_uc, decltype(&stbi_image_free)> data(stbi_load(path.c_str(), &w, &h, &channels, 3),
                                                            &stbi_image_free);
  if (!data) throw Error("cannot read the image " + quote(path) + ": " + stbi_failure_reason());
  RgbImageData out;
  out.width = w;
  out.height = h;
  out.pixels.assign(data.get(), data.get() + static_cast<size_t>(w) * h * 3);
  return out;
}

}  // namespace dpinfer::io

// libFuzzer: io::decode_rgb_image on arbitrary bytes (an img2img item's input image or mask: PNG through
// stb_image, JPEG through libjpeg-turbo, WebP through libwebp), then, for what decodes, the Lanczos resize to a
// size taken from the input; and io::image_dimensions (the header alone), which must agree with the decode. The header's pixel count is capped at 2^20 here, as dpinfer caps it at 16384^2, so
// that a claimed huge image is refused before its buffer exists. The first byte picks the format's magic to put
// in front of the rest (0: none), so the fuzzer reaches each decoder without guessing its signature.
#include <cstdint>
#include <string>

#include "dpinfer/io/image_reader.h"
#include "dpinfer/io/image_resize.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  std::string bytes;
  switch (data[0] % 4) {
    case 1: bytes.assign("\x89PNG\r\n\x1a\n", 8); break;
    case 2: bytes.assign("\xFF\xD8\xFF", 3); break;
    case 3: bytes.assign("RIFF\0\0\0\0WEBP", 12); break;
    default: break;
  }
  const int width = 1 + data[1] % 64, height = 1 + data[2] % 64;
  bytes.append(reinterpret_cast<const char*>(data) + 3, size - 3);
  io::ImageDimensions header;
  bool header_read = false;
  try {
    header = io::image_dimensions(bytes, "input.png", int64_t{1} << 20);
    header_read = header.width >= 1 && header.height >= 1;
    if (!header_read) std::abort();
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  try {
    const io::RgbImageData image = io::decode_rgb_image(bytes, "input.png", int64_t{1} << 20);
    // What decode promises: a whole RGB image within the cap.
    if (image.width < 1 || image.height < 1 || int64_t{image.width} * image.height > (int64_t{1} << 20) ||
        image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3)
      std::abort();
    // What decodes has the size its header gave (a header that reads also decodes only if the data is whole).
    if (!header_read || header.width != image.width || header.height != image.height) std::abort();
    const io::RgbImageData sized = io::resize_lanczos(image, width, height);
    if (sized.pixels.size() != static_cast<size_t>(width) * height * 3) std::abort();
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

// Input images (issue 29): dpinfer's decoders and its port of Pillow's Lanczos resize against what
// Pillow 12 and diffusers' VaeImageProcessor make of the same files (tools/fixtures/make_input_image_goldens.py),
// byte for byte; and the one-line refusals of files that are not images.

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dpinfer/io/image_reader.h"
#include "dpinfer/io/image_resize.h"
#include "dpinfer/util/error.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kDir = std::string(DPINFER_TEST_DATA_DIR) + "/input-images/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), {}};
}

nlohmann::json goldens() { return nlohmann::json::parse(slurp(kDir + "goldens.json")); }

/// The pixels that differ, with the first one named.
::testing::AssertionResult same_pixels(const dpinfer::io::RgbImageData& image, int width, int height,
                                       const std::string& expected) {
  if (image.width != width || image.height != height)
    return ::testing::AssertionFailure() << "size " << image.width << "x" << image.height << ", expected " << width
                                         << "x" << height;
  if (expected.size() != image.pixels.size()) return ::testing::AssertionFailure() << "golden size differs";
  size_t differing = 0, first = 0;
  for (size_t k = 0; k < expected.size(); ++k)
    if (static_cast<uint8_t>(expected[k]) != image.pixels[k] && differing++ == 0) first = k;
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differing << " of " << expected.size() << " bytes differ; first at "
                                       << first << ": " << int(image.pixels[first]) << " vs "
                                       << int(static_cast<uint8_t>(expected[first]));
}

TEST(InputImages, DecodeAsPillowDoes) {
  const nlohmann::json index = goldens();
  for (const auto& c : index["cases"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const auto image = dpinfer::io::read_rgb_image(kDir + file);
    EXPECT_TRUE(same_pixels(image, c["width"], c["height"], slurp(kDir + file + ".rgb")));
  }
}

TEST(InputImages, ResizeAsVaeImageProcessorDoes) {
  int checked = 0;
  const nlohmann::json index = goldens();
  for (const auto& c : index["cases"]) {
    const std::string file = c["file"];
    const dpinfer::io::RgbImageData pillow{c["width"], c["height"], {}};
    std::string decoded = slurp(kDir + file + ".rgb");
    dpinfer::io::RgbImageData source = pillow;
    source.pixels.assign(decoded.begin(), decoded.end());  // Pillow's own pixels: the resize alone is compared
    for (const auto& r : c["resized"]) {
      SCOPED_TRACE(file + " to " + r[0].dump() + "x" + r[1].dump());
      const auto resized = dpinfer::io::resize_lanczos(source, r[0], r[1]);
      EXPECT_TRUE(same_pixels(resized, r[0], r[1], slurp(kDir + r[2].get<std::string>())));
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
}

// The size from the header alone (FLUX.2 sizes an item by its reference before decoding it) is the decoded size.
TEST(InputImages, DimensionsFromTheHeaderAreTheDecodedSize) {
  const nlohmann::json index = goldens();
  for (const auto& c : index["cases"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const dpinfer::io::ImageDimensions size = dpinfer::io::image_dimensions(slurp(kDir + file), file);
    EXPECT_EQ(size.width, c["width"].get<int>());
    EXPECT_EQ(size.height, c["height"].get<int>());
  }
  // Nothing past the header is read: a PNG cut after IHDR still has its size; a huge one is refused.
  std::string png = slurp(kDir + "rgb.png").substr(0, 33);
  const dpinfer::io::ImageDimensions cut = dpinfer::io::image_dimensions(png, "cut.png");
  EXPECT_GT(cut.width, 0);
  for (int k = 0; k < 4; ++k) png[16 + k] = png[20 + k] = static_cast<char>(k == 1 ? 0x4E : k == 2 ? 0x20 : 0);
  EXPECT_THROW(dpinfer::io::image_dimensions(png, "huge.png"), dpinfer::InputError);  // 20000 x 20000
  try {
    dpinfer::io::image_dimensions("not an image at all", "text.png");
    ADD_FAILURE() << "read a size";
  } catch (const dpinfer::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("text.png"), std::string::npos) << e.what();
  }
}

TEST(InputImages, SameSizeIsACopy) {
  const auto image = dpinfer::io::read_rgb_image(kDir + "rgb.png");
  const auto same = dpinfer::io::resize_lanczos(image, image.width, image.height);
  EXPECT_EQ(same.pixels, image.pixels);
}

TEST(InputImages, RefusalsNameTheFile) {
  const std::string png = slurp(kDir + "rgb.png");
  const std::string jpg = slurp(kDir + "q90-420.jpg");
  const std::string webp = slurp(kDir + "lossy.webp");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"text.png", "not an image at all"},
      {"cut.png", png.substr(0, png.size() / 2)},
      {"cut.jpg", jpg.substr(0, 40)},
      {"cut.webp", webp.substr(0, webp.size() / 2)},
      {"empty.png", ""},
  };
  for (const auto& [name, bytes] : bad) {
    SCOPED_TRACE(name);
    try {
      dpinfer::io::decode_rgb_image(bytes, name);
      ADD_FAILURE() << "decoded";
    } catch (const dpinfer::InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(InputImages, RefusesAHugeHeaderBeforeDecoding) {
  // A PNG header claiming 20000 x 20000 pixels, with no image data after it.
  std::string png = slurp(kDir + "rgb.png").substr(0, 33);
  const auto put32 = [&png](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) png[at + k] = static_cast<char>((v >> (24 - 8 * k)) & 0xFF);
  };
  put32(16, 20000);
  put32(20, 20000);
  try {
    dpinfer::io::decode_rgb_image(png, "huge.png");
    ADD_FAILURE() << "decoded";
  } catch (const dpinfer::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("20000x20000"), std::string::npos) << e.what();
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

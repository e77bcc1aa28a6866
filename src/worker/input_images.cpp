#include "dpinfer/worker/input_images.h"

#include "dpinfer/io/image_resize.h"
#include "dpinfer/util/error.h"
#include "dpinfer/worker/model_hashes.h"

namespace dpinfer::worker {

std::string InputImages::sha256(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = hashes_.find(path);
  if (it != hashes_.end()) return it->second;
  std::string hash;
  try {
    hash = sha256_of_files({path});
  } catch (const Error&) {
    // Unreadable now: recorded as such; making the item reports why.
  }
  hashes_.emplace(path, hash);
  return hash;
}

io::ImageDimensions InputImages::dimensions(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = dimensions_.find(path);
    if (it != dimensions_.end()) return it->second;
  }
  const io::ImageDimensions size = io::image_dimensions(read_and_hash(path), path);
  std::lock_guard<std::mutex> lock(mutex_);
  dimensions_.emplace(path, size);
  return size;
}

std::string InputImages::read_and_hash(const std::string& path) {
  std::string bytes = io::read_image_file(path);
  const std::string hash = sha256_of_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  hashes_[path] = hash;  // the bytes the item is made from, even if an earlier read of the file differed
  return bytes;
}

std::shared_ptr<const pipeline::RgbImage> InputImages::load(const std::string& path, int width, int height) {
  return load(path, [&](int, int) { return pipeline::ReferenceSize{{width, height}, {width, height}}; });
}

std::shared_ptr<const pipeline::RgbImage> InputImages::load(
    const std::string& path, const std::function<pipeline::ReferenceSize(int, int)>& size_for) {
  if (path != last_path_) {
    last_ = io::decode_rgb_image(read_and_hash(path), path);
    last_path_ = path;
  }
  const pipeline::ReferenceSize size = size_for(last_.width, last_.height);
  io::RgbImageData sized = io::resize_lanczos(last_, size.resized[0], size.resized[1]);
  if (size.size != size.resized) sized = io::crop_center(sized, size.size[0], size.size[1]);
  auto out = std::make_shared<pipeline::RgbImage>();
  out->width = sized.width;
  out->height = sized.height;
  out->pixels = std::move(sized.pixels);
  return out;
}

std::shared_ptr<const pipeline::GrayImage> InputImages::load_mask(const std::string& path, int width, int height) {
  io::RgbImageData rgb = io::decode_rgb_image(read_and_hash(path), path);
  // Pillow's Convert.c rgb2l: L = (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16. The luma is
  // written to all three channels, so that the RGB resampler resizes it as Pillow resizes an "L" image.
  for (size_t k = 0; k + 2 < rgb.pixels.size(); k += 3) {
    const uint32_t l = (rgb.pixels[k] * 19595u + rgb.pixels[k + 1] * 38470u + rgb.pixels[k + 2] * 7471u + 0x8000u) >> 16;
    rgb.pixels[k] = rgb.pixels[k + 1] = rgb.pixels[k + 2] = static_cast<uint8_t>(l);
  }
  const io::RgbImageData sized = io::resize_lanczos(rgb, width, height);
  auto out = std::make_shared<pipeline::GrayImage>();
  out->width = sized.width;
  out->height = sized.height;
  out->pixels.resize(static_cast<size_t>(sized.width) * sized.height);
  for (size_t k = 0; k < out->pixels.size(); ++k) out->pixels[k] = sized.pixels[k * 3];
  return out;
}

}  // namespace dpinfer::worker

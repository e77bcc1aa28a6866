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

std::shared_ptr<const pipeline::RgbImage> InputImages::load(const std::string& path, int width, int height) {
  if (path != last_path_) {
    last_ = io::read_rgb_image(path);
    last_path_ = path;
  }
  io::RgbImageData sized = io::resize_lanczos(last_, width, height);
  auto out = std::make_shared<pipeline::RgbImage>();
  out->width = sized.width;
  out->height = sized.height;
  out->pixels = std::move(sized.pixels);
  return out;
}

}  // namespace dpinfer::worker

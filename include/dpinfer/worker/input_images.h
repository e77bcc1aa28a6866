#pragma once
// The input images of img2img items (issue 29): each file hashed once per run, for the records
// and resume's identity, and decoded and resized to its item's size when the item is made.
// The hash comes from the bytes load() and load_mask() read to decode (issue 27: hashing every
// input at planning read each file twice, and cost a million-item resume a read per item);
// sha256() reads a file only when no load has (an item resume checks without making it).

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "dpinfer/io/image_reader.h"
#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::worker {

class InputImages {
 public:
  /// The SHA-256 (64 hex digits) of the file at `path`: of the bytes load() or load_mask() read,
  /// else read now, once per path and run; empty when it cannot be read (the item then fails when
  /// it is made, naming the file). Thread-safe: the writer thread asks too.
  std::string sha256(const std::string& path);

  /// The image at `path` at width x height: decoded (io/image_reader.h) and, when its size is
  /// another, resized as diffusers' VaeImageProcessor.resize does (Pillow's Lanczos). Throws
  /// InputError naming the file. Keeps the last file's decoded pixels, which a line's items share.
  std::shared_ptr<const pipeline::RgbImage> load(const std::string& path, int width, int height);
  /// A reference (pipeline::PipelineInfo::image_is_reference): decoded, resized with Lanczos and cut around
  /// its centre as `size_for` says for the image's own width and height (TextToImage::reference_size()).
  std::shared_ptr<const pipeline::RgbImage> load(
      const std::string& path, const std::function<pipeline::ReferenceSize(int, int)>& size_for);

  /// The width and height of the image at `path`, from its header (io::image_dimensions), once per path and run:
  /// what a pipeline that takes its size from a reference (PipelineInfo::size_from_reference) sizes an item by.
  /// Reading the file keeps its hash for sha256(). Throws Error or InputError naming the file.
  io::ImageDimensions dimensions(const std::string& path);

  /// The inpainting mask at `path` at width x height: decoded, converted to grayscale as PIL's
  /// convert("L") does (ITU-R 601-2 luma in 16-bit fixed point), and resized with Lanczos, as
  /// diffusers' mask processor does. Throws InputError naming the file.
  std::shared_ptr<const pipeline::GrayImage> load_mask(const std::string& path, int width, int height);

 private:
  /// The file's bytes (io::read_image_file), their hash kept for sha256().
  std::string read_and_hash(const std::string& path);

  std::mutex mutex_;
  std::unordered_map<std::string, std::string> hashes_;
  std::unordered_map<std::string, io::ImageDimensions> dimensions_;
  std::string last_path_;
  io::RgbImageData last_;
};

}  // namespace dpinfer::worker

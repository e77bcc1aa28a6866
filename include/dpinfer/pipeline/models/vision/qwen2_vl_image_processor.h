#pragma once
// transformers' Qwen2VLImageProcessorFast (4.57.6: what from_pretrained loads for Qwen-Image-Edit's processor/,
// whichever class its preprocessor_config.json names, since Qwen2VLProcessor needs torchvision and transformers then
// forces the fast class) for one RGB image: smart_resize to multiples of patch_size * merge_size within
// [min_pixels, max_pixels], torchvision's antialiased bicubic resize of the uint8 image, the fused rescale and
// normalize in float32, the frame repeated to temporal_patch_size, and the patches flattened in the order the vision
// tower (models/vision/qwen2_5_vl_vision.h) reads them. pixel_values are bit for bit transformers' in float32.

#include <array>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>

#include "dpinfer/io/image_reader.h"

namespace dpinfer::pipeline {

/// A preprocessor_config.json of Qwen2VLImageProcessor. The defaults are the class's.
struct Qwen2VLImageProcessorConfig {
  bool do_resize = true;
  /// The resampling filter, as PIL names it; only 3 (BICUBIC, the default) is implemented.
  int64_t resample = 3;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  /// Per channel (a single number in the file means the same for all three); used in float32.
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
  /// Read and kept: the input is RGB already (io::RgbImageData: grey and palette expanded, alpha dropped, as
  /// transformers' convert_to_rgb, PIL's convert("RGB"), leaves them), so converting is the identity.
  bool do_convert_rgb = true;
  /// The pixel-count bounds of smart_resize: `size`'s shortest_edge and longest_edge (a `size` without both keys is
  /// refused, as transformers refuses it), each overridden by "min_pixels" / "max_pixels" when given, as the fast
  /// class's __init__ and _further_process_kwargs take them.
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;

  /// Parses a preprocessor_config.json. Throws InputError naming the field at fault.
  static Qwen2VLImageProcessorConfig from_json(const nlohmann::json& json);
  /// Reads and parses `path`. Throws InputError naming the file.
  static Qwen2VLImageProcessorConfig from_file(const std::string& path);
  /// from_file(dir + "/preprocessor_config.json"): a pipeline's processor/ folder.
  static Qwen2VLImageProcessorConfig from_dir(const std::string& dir);
};

/// transformers' smart_resize(height, width, factor, min_pixels, max_pixels): {height, width}, each a
/// multiple of `factor`, the aspect kept as closely as the factor allows (Python's round, half to even),
/// scaled down (floor) past max_pixels or up (ceil) below min_pixels. Throws InputError for an aspect
/// ratio above 200 (as transformers does) or a result of zero pixels.
std::array<int64_t, 2> qwen2_vl_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                             int64_t max_pixels);

/// One image as the vision tower takes it.
struct Qwen2VLImageInput {
  /// [grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size^2] float32 on the CPU: rows in
  /// (t, h / merge, w / merge, merge, merge) order, each row (channel, frame, y, x).
  at::Tensor pixel_values;
  /// {grid_t, grid_h, grid_w} in patches; grid_t is 1 for an image.
  std::array<int64_t, 3> grid_thw{};
  /// The size the image was resized to (its own when do_resize is false).
  int64_t resized_height = 0, resized_width = 0;
};

/// Qwen2VLImageProcessor.preprocess for a single image.
class Qwen2VLImageProcessor {
 public:
  explicit Qwen2VLImageProcessor(Qwen2VLImageProcessorConfig config) : config_(config) {}

  /// `image` as pixel_values and its grid. Throws InputError for an image smart_resize refuses, or one
  /// whose size is not a multiple of patch_size * merge_size when do_resize is false.
  Qwen2VLImageInput preprocess(const io::RgbImageData& image) const;

  const Qwen2VLImageProcessorConfig& config() const { return config_; }

 private:
  Qwen2VLImageProcessorConfig config_;
};

}  // namespace dpinfer::pipeline

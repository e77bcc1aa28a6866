#include "dpinfer/pipeline/models/vision/qwen2_vl_image_processor.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dpinfer/io/config_reader.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;

// image_mean / image_std: one number for every channel, or one per channel (transformers' normalize).
std::array<double, 3> qwen_processor_per_channel(const ConfigReader& r, const std::string& key,
                                                 const std::array<double, 3>& fallback) {
  const json* v = r.find(key);
  if (v == nullptr) return fallback;
  if (v->is_number()) {
    const double x = r.number(key, 0.0);
    return {x, x, x};
  }
  const std::optional<std::vector<double>> list = r.numbers(key);
  if (!list || list->size() != 3)
    throw r.error(key, "must be a number or a list of 3 numbers (one per RGB channel), got " + ConfigReader::show(*v));
  return {(*list)[0], (*list)[1], (*list)[2]};
}

}  // namespace

// Ref: transformers 4.57.6 image_processing_qwen2_vl_fast.py Qwen2VLImageProcessorFast.__init__ and
// _further_process_kwargs (the class from_pretrained loads for either name, see preprocess()).
Qwen2VLImageProcessorConfig Qwen2VLImageProcessorConfig::from_json(const json& j) {
  try {
    const ConfigReader r(j, "preprocessor_config.json");
    Qwen2VLImageProcessorConfig c;
    const std::string type = r.string("image_processor_type", "Qwen2VLImageProcessor");
    if (type != "Qwen2VLImageProcessor" && type != "Qwen2VLImageProcessorFast")
      throw r.unsupported("image_processor_type", type, "Qwen2VLImageProcessor or Qwen2VLImageProcessorFast");
    c.do_resize = r.boolean("do_resize", c.do_resize);
    c.resample = r.integer("resample", c.resample);
    if (c.resample != 3) throw r.unsupported("resample", c.resample, "3 (bicubic)");
    c.do_rescale = r.boolean("do_rescale", c.do_rescale);
    c.rescale_factor = r.number("rescale_factor", c.rescale_factor);
    if (!std::isfinite(c.rescale_factor))
      throw r.error("rescale_factor", "must be a finite number, got " + ConfigReader::show(c.rescale_factor));
    c.do_normalize = r.boolean("do_normalize", c.do_normalize);
    c.image_mean = qwen_processor_per_channel(r, "image_mean", c.image_mean);
    c.image_std = qwen_processor_per_channel(r, "image_std", c.image_std);
    for (size_t i = 0; i < 3; ++i) {
      if (!std::isfinite(c.image_mean[i]))
        throw r.error(ConfigReader::indexed("image_mean", i), "must be a finite number");
      if (!std::isfinite(c.image_std[i]) || c.image_std[i] == 0.0)
        throw r.error(ConfigReader::indexed("image_std", i), "must be a finite, non-zero number");
    }
    c.do_convert_rgb = r.boolean("do_convert_rgb", c.do_convert_rgb);
    // Qwen2VLImageProcessorFast.__init__ and _further_process_kwargs: `size` {shortest_edge, longest_edge} (both keys
    // or an error), each overridden by min_pixels / max_pixels when the file gives them.
    if (const json* size = r.find("size")) {
      if (!size->is_object() || !size->contains("shortest_edge") || !size->contains("longest_edge"))
        throw r.error("size", "must contain 'shortest_edge' and 'longest_edge' keys, got " + ConfigReader::show(*size));
      const ConfigReader sizes(*size, "preprocessor_config.json size");
      c.min_pixels = sizes.integer("shortest_edge", c.min_pixels);
      c.max_pixels = sizes.integer("longest_edge", c.max_pixels);
    }
    c.min_pixels = r.integer("min_pixels", c.min_pixels);
    if (c.min_pixels < 0) throw r.error("min_pixels", "must be >= 0, got " + std::to_string(c.min_pixels));
    c.max_pixels = r.positive("max_pixels", c.max_pixels);
    c.patch_size = r.positive("patch_size", c.patch_size);
    c.temporal_patch_size = r.positive("temporal_patch_size", c.temporal_patch_size);
    c.merge_size = r.positive("merge_size", c.merge_size);
    if (c.patch_size > 64) throw r.error("patch_size", "= " + std::to_string(c.patch_size) + " must be at most 64");
    if (c.temporal_patch_size > 16)
      throw r.error("temporal_patch_size", "= " + std::to_string(c.temporal_patch_size) + " must be at most 16");
    if (c.merge_size > 16) throw r.error("merge_size", "= " + std::to_string(c.merge_size) + " must be at most 16");
    return c;
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

Qwen2VLImageProcessorConfig Qwen2VLImageProcessorConfig::from_file(const std::string& path) {
  json j;
  try {
    j = io::read_json_file(path, "fix or re-download it");
  } catch (const Error& e) {
    throw InputError(std::string("image processor: ") + e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    throw InputError(std::string(e.what()) + " (in '" + path + "')");
  }
}

Qwen2VLImageProcessorConfig Qwen2VLImageProcessorConfig::from_dir(const std::string& dir) {
  return from_file(dir + "/preprocessor_config.json");
}

// Ref: image_processing_qwen2_vl.py smart_resize. Python's true division and round (half to even, which
// std::nearbyint does in the default rounding mode), math.floor, math.ceil and math.sqrt on doubles.
std::array<int64_t, 2> qwen2_vl_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                             int64_t max_pixels) {
  if (height < 1 || width < 1 || factor < 1)
    throw InputError("image processor: cannot resize a " + std::to_string(width) + "x" + std::to_string(height) +
                     " image");
  const double ratio = static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (ratio > 200)
    throw InputError("image processor: the image's aspect ratio must be smaller than 200, got " +
                     std::to_string(ratio) + " (" + std::to_string(width) + "x" + std::to_string(height) + ")");
  const auto h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  auto h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  auto w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(static_cast<double>(height * width) / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / static_cast<double>(height * width));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  if (h_bar < 1 || w_bar < 1)
    throw InputError("image processor: a " + std::to_string(width) + "x" + std::to_string(height) +
                     " image resizes to no pixels (min_pixels " + std::to_string(min_pixels) + ")");
  return {h_bar, w_bar};
}

// Ref: transformers 4.57.6 image_processing_qwen2_vl_fast.py Qwen2VLImageProcessorFast._preprocess for one image, the
// class from_pretrained loads whatever preprocessor_config.json names (FORCE_FAST_IMAGE_PROCESSOR, with torchvision,
// which Qwen2VLProcessor needs for its video processor). The image as pil_to_tensor gives it ([C, H, W] uint8);
// torchvision's resize_image: interpolate(bicubic, align_corners False, antialias True) on the uint8 tensor itself
// (torchvision's _do_native_uint8_resize_on_cpu), nothing when the size is the image's; then the fused
// rescale-normalize of image_processing_utils_fast.py (mean and std in float32 times 1 / rescale_factor, the image
// cast to float32, sub, div); the frame repeated to temporal_patch_size, and the patches flattened as the tower
// reads them. Every step is the same ATen call on the CPU, so pixel_values are transformers' bit for bit.
Qwen2VLImageInput Qwen2VLImageProcessor::preprocess(const io::RgbImageData& image) const {
  const Qwen2VLImageProcessorConfig& c = config_;
  const int64_t factor = c.patch_size * c.merge_size;
  if (image.width < 1 || image.height < 1 ||
      image.pixels.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3)
    throw InputError("image processor: the image has no pixels or the wrong number of them");
  at::Tensor x = at::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3},
                               at::TensorOptions().dtype(at::kByte))
                     .permute({2, 0, 1})
                     .contiguous()
                     .unsqueeze(0);  // [1, C, H, W] uint8
  if (c.do_resize) {
    const auto [h, w] = qwen2_vl_smart_resize(image.height, image.width, factor, c.min_pixels, c.max_pixels);
    if (h != image.height || w != image.width)
      x = at::_upsample_bicubic2d_aa(x, {h, w}, /*align_corners=*/false, std::nullopt, std::nullopt);
  } else if (image.height % factor != 0 || image.width % factor != 0) {
    throw InputError("image processor: with do_resize false the image's sides must be multiples of patch_size * "
                     "merge_size = " + std::to_string(factor) + ", got " + std::to_string(image.width) + "x" +
                     std::to_string(image.height));
  }
  const auto per_channel = [](const std::array<double, 3>& v) {
    return at::tensor({v[0], v[1], v[2]}, at::kDouble).to(at::kFloat);  // torch.tensor(list): float32
  };
  if (c.do_normalize) {
    at::Tensor mean = per_channel(c.image_mean), std = per_channel(c.image_std);
    if (c.do_rescale) {  // _fuse_mean_std_and_rescale_factor
      mean = mean * (1.0 / c.rescale_factor);
      std = std * (1.0 / c.rescale_factor);
    }
    x = x.to(at::kFloat).sub(mean.view({-1, 1, 1})).div_(std.view({-1, 1, 1}));
  } else if (c.do_rescale) {
    x = x * c.rescale_factor;  // uint8 times a Python float: float32
  } else {
    x = x.to(at::kFloat);  // uint8 values, which float32 holds exactly (the tower casts them anyway)
  }
  // One frame, repeated to temporal_patch_size; then (t, T, C, h/m, m, p, w/m, m, p) transposed to
  // (t, h/m, w/m, m, m, C, T, p, p) and flattened to one row per patch.
  const int64_t height = x.size(2), width = x.size(3);
  const int64_t p = c.patch_size, m = c.merge_size, t = c.temporal_patch_size;
  const int64_t grid_h = height / p, grid_w = width / p;
  const at::Tensor frames = x.unsqueeze(1).expand({1, t, 3, height, width});
  Qwen2VLImageInput out;
  out.pixel_values = frames.reshape({1, 1, t, 3, grid_h / m, m, p, grid_w / m, m, p})
                         .permute({0, 1, 4, 7, 5, 8, 3, 2, 6, 9})
                         .reshape({grid_h * grid_w, 3 * t * p * p})
                         .contiguous();
  out.grid_thw = {1, grid_h, grid_w};
  out.resized_height = height;
  out.resized_width = width;
  return out;
}

}  // namespace dpinfer::pipeline

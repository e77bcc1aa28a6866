#pragma once
// What the worker asks of a pipeline. Deliberately free of LibTorch types and of
// ranks: the worker knows items and files, the pipeline knows models.

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// One image to make.
struct ImageRequest {
  std::string prompt;
  std::string negative_prompt;
  uint64_t seed = 0;  ///< seeds this image's own CPU generator (torch's mt19937)
  int steps = 0;
  double guidance_scale = 0;
  int width = 0;
  int height = 0;
};

/// 8-bit RGB, row-major, height × width × 3.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
  bool finite = true;  ///< false when the decoded image had NaN/Inf (it is then garbage)
};

/// Facts recorded in every image's metadata and in run.json.
struct PipelineInfo {
  std::string model_name;      ///< e.g. the model directory's name or hub id
  std::string model_path;
  std::string scheduler_name;  ///< dpinfer's name, e.g. "pndm"
  std::string sampler_label;   ///< AUTOMATIC1111's name, e.g. "PNDM", "DPM++ 2M Karras"
  std::string device;          ///< "cpu", "cuda:1"
  std::string dtype;           ///< "fp32", "fp16", "bf16"
  int default_width = 512;
  int default_height = 512;
  int default_steps = 50;
  double default_guidance_scale = 7.5;
};

class TextToImage {
 public:
  virtual ~TextToImage() = default;
  virtual const PipelineInfo& info() const = 0;
  /// Makes one image per request, as one batch. All requests share steps,
  /// guidance_scale, width and height. Each image depends only on its own request
  /// (its seed included), never on the rest of the batch, up to float rounding.
  /// Throws dpinfer::Error (or c10::Error) on failure.
  virtual std::vector<RgbImage> generate(const std::vector<ImageRequest>& batch) = 0;
};

}  // namespace dpinfer::pipeline

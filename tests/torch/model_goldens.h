#pragma once
// Reading the component goldens that tools/fixtures/make_pipelines.py writes under
// tests/data/pipelines/<name>.golden/, and comparing model outputs with them.
// Header-only: the model parity tests (test_clip_text_model, test_unet, test_autoencoder_kl) share it.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::test {

/// The fixture pipelines every parity test runs over.
inline const std::vector<std::string>& fixture_pipelines() {
  static const std::vector<std::string> names = {"tiny-sd1", "tiny-sd2v", "tiny-3down"};
  return names;
}

/// tests/data/pipelines/<name>, the diffusers-format model folder.
inline std::string pipeline_dir(const std::string& name) {
  return std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/" + name;
}

/// tests/data/pipelines/<name>.golden/cases.json. Python's json writes -Infinity, Infinity
/// and NaN (a DPMSolver config's lambda_min_clipped), which strict JSON lacks: they read as null.
inline nlohmann::json golden_cases(const std::string& name) {
  std::ifstream in(pipeline_dir(name) + ".golden/cases.json");
  if (!in) throw std::runtime_error("missing golden cases for " + name);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  for (const char* token : {": -Infinity", ": Infinity", ": NaN"})
    for (size_t at = s.find(token); at != std::string::npos; at = s.find(token, at))
      s.replace(at, std::strlen(token), ": null");
  return nlohmann::json::parse(s);
}

/// tests/data/models/<name>, a single model folder (config.json + weights) of the component
/// fixtures (make_llm_text_encoder_goldens.py, make_z_image_goldens.py), with its goldens in
/// <name>.golden/.
inline std::string model_fixture_dir(const std::string& name) {
  return std::string(DPINFER_TEST_DATA_DIR) + "/models/" + name;
}

/// The diffusers component `class_name` in the fixture folder model_fixture_dir(`name`), as
/// model_dir would describe it under model_index.json's `component` name.
inline pipeline::Component fixture_component(const std::string& name, const std::string& component,
                                             pipeline::ComponentRole role, const std::string& class_name) {
  pipeline::Component c;
  c.name = component;
  c.role = role;
  c.library = "diffusers";
  c.class_name = class_name;
  c.path = model_fixture_dir(name);
  c.config = io::read_json_file(c.path + "/config.json");
  return c;
}

/// One golden safetensors file; tensors come out as owning CPU copies.
class GoldenFile {
 public:
  GoldenFile(const std::string& pipeline, const std::string& file)
      : GoldenFile(pipeline_dir(pipeline) + ".golden/" + file) {}
  /// The golden file at `path`.
  explicit GoldenFile(const std::string& path) : file_(io::SafetensorsFile::open(path)) {}

  at::Tensor operator[](const std::string& name) const {
    const io::TensorView* view = file_->find(name);
    if (view == nullptr) throw std::runtime_error("golden tensor '" + name + "' not in " + file_->path());
    at::ScalarType type;
    switch (view->dtype) {
      case io::Dtype::kF32: type = at::kFloat; break;
      case io::Dtype::kF16: type = at::kHalf; break;
      case io::Dtype::kBF16: type = at::kBFloat16; break;
      case io::Dtype::kI64: type = at::kLong; break;
      case io::Dtype::kU8: type = at::kByte; break;
      default: throw std::runtime_error("golden tensor '" + name + "' has an unexpected dtype");
    }
    // The mapping is read-only and may be unaligned: from_blob only to copy out.
    return at::from_blob(const_cast<std::byte*>(view->data), view->shape, at::TensorOptions().dtype(type)).clone();
  }

 private:
  std::shared_ptr<const io::SafetensorsFile> file_;
};

/// ||actual - expected|| / ||expected|| in float64.
inline double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  at::Tensor a = actual.detach().to(at::kCPU, at::kDouble), e = expected.detach().to(at::kCPU, at::kDouble);
  return (a - e).norm().item<double>() / e.norm().item<double>();
}

/// The parity bound of the issue: fp32 on CPU within 1e-4 relative L2 of the reference.
constexpr double kParityTolerance = 1e-4;

/// EXPECTs `actual` to match `expected` in shape, to be finite and to lie within `tolerance`, and reports the
/// relative error, the largest |difference| and whether the two are bit-identical.
inline void expect_close(const at::Tensor& actual, const at::Tensor& expected, const std::string& what,
                         double tolerance = kParityTolerance) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const at::Tensor a = actual.detach().to(at::kCPU, at::kDouble), e = expected.detach().to(at::kCPU, at::kDouble);
  ASSERT_TRUE(a.isfinite().all().item<bool>()) << what;
  const double err = relative_error(a, e);
  EXPECT_LE(err, tolerance) << what;
  std::printf("  %-52s rel err %.3e  max |d| %.3e%s\n", what.c_str(), err, (a - e).abs().max().item<double>(),
              at::equal(a, e) ? "  (bit-identical)" : "");
}

}  // namespace dpinfer::test

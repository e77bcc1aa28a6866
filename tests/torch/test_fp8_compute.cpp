// --fp8-compute (issue 28, the GPU levers) on the CPU: dpinfer computes in float8 exactly the layers torchao 0.15
// quantizes under the same filter (make_fp8_compute_pipelines.py records their names; the images are held to
// torchao's bit for bit in PipelineParity, fp8-compute/), an image's float8 products do not depend on its
// batch-mates, and what cannot run is refused in one line before a weight is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/fp8_compute.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";

class Fp8Compute : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Compute, ComputesTheLayersTorchaoQuantizes) {
  const std::string name = GetParam();
  std::ifstream in(kPipelines + name + ".golden/fp8-compute/cases.json");
  ASSERT_TRUE(in) << name;
  const auto theirs = nlohmann::json::parse(in).at("fp8_layers").get<std::vector<std::string>>();
  const ModelDir model = resolve_model(kPipelines + name, "", nullptr, {});
  const Component& c = model.at("transformer");
  // On the CPU in bf16 (ATen's abs has no meta kernel); the values are never read but quantized, as at a load.
  c10::InferenceMode guard;
  const auto module = find_model_class(c.class_name)->build(c.config, at::TensorOptions().dtype(at::kBFloat16));
  std::vector<std::string> ours = compute_blocks_in_fp8(*module, c.name, "tensorwise");
  std::sort(ours.begin(), ours.end());
  EXPECT_EQ(ours, theirs) << name;
  // Each changed layer keeps float8 values and a [1, 1] float32 scale that a module move takes along.
  for (const auto& item : module->named_modules("", false)) {
    const auto* linear = dynamic_cast<const nn::LinearImpl*>(item.value().get());
    if (!linear || !linear->computes_in_fp8()) continue;
    EXPECT_EQ(linear->weight.scalar_type(), at::kFloat8_e4m3fn) << item.key();
    const at::Tensor* scale = linear->named_buffers(false).find("fp8_weight_scale");
    ASSERT_NE(scale, nullptr) << item.key();
    EXPECT_EQ(scale->sizes(), at::IntArrayRef({1, 1})) << item.key();
    EXPECT_EQ(scale->scalar_type(), at::kFloat) << item.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Compute,
                         ::testing::Values("tiny-flux-dev", "tiny-qwen-image", "tiny-chroma", "tiny-sd3",
                                           "tiny-z-image", "tiny-flux2-klein"),
                         dpinfer::test::FixtureParamName());

// Per tensor, torchao's input scale spans the call; dpinfer's spans one image, so that an image's products are the
// same alone and in a batch whose other images have larger values (which would raise a shared scale and so
// coarsen its float8 steps).
TEST(Fp8ComputeLinear, AnImageIsTheSameAloneAndInABatch) {
  c10::InferenceMode guard;
  at::manual_seed(0);
  const auto options = at::TensorOptions().dtype(at::kBFloat16);
  nn::Linear linear(64, 32, /*bias=*/true, options);
  linear->weight.copy_(at::randn({32, 64}, options));
  linear->bias.copy_(at::randn({32}, options));
  linear->compute_in_fp8(/*rowwise=*/false);
  EXPECT_EQ(linear->weight.scalar_type(), at::kFloat8_e4m3fn);
  const at::Tensor alone = at::randn({1, 5, 64}, options);
  const at::Tensor loud = at::randn({2, 5, 64}, options) * 50;  // batch-mates with 50 times its range
  const at::Tensor batched = linear->forward(at::cat({loud.narrow(0, 0, 1), alone, loud.narrow(0, 1, 1)}, 0));
  const at::Tensor single = linear->forward(alone);
  EXPECT_EQ(single.scalar_type(), at::kBFloat16);
  EXPECT_EQ(single.sizes(), at::IntArrayRef({1, 5, 32}));
  EXPECT_TRUE(at::equal(batched.narrow(0, 1, 1), single));
  // The products are float8's, not the run dtype's: near them, but not them.
  const at::Tensor exact = at::linear(alone, linear->weight.to(at::kBFloat16), linear->bias);
  EXPECT_FALSE(at::equal(single, exact));
}

/// A load of `name` with --fp8-compute `mode` and the other fields given; the error's text, or "" when it loads.
std::string load_error(const std::string& name, const std::string& mode, const std::string& dtype,
                       const std::string& weight_storage = "default") {
  LoadRequest r;
  r.model = kPipelines + name;
  r.dtype = dtype;
  r.fp8_compute = mode;
  r.weight_storage = weight_storage;
  try {
    load_text_to_image(r);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8ComputeLoad, WhatCannotRunIsRefusedInOneLine) {
  EXPECT_EQ(load_error("tiny-sd1", "tensorwise", "bf16"),
            "--fp8-compute tensorwise: the unet has no transformer blocks (a UNet); fp8 compute is for the DiT "
            "families (FLUX.1, FLUX.2, Chroma, SD3, Qwen-Image, Z-Image); drop --fp8-compute for this model");
  EXPECT_EQ(load_error("tiny-flux-dev", "rowwise", "bf16"),
            "--fp8-compute rowwise: LibTorch's CPU _scaled_mm takes one scale per tensor only; use --fp8-compute "
            "tensorwise on the CPU, or a CUDA device");
  EXPECT_EQ(load_error("tiny-flux-dev", "tensorwise", "bf16", "fp8-denoiser"),
            "--fp8-compute tensorwise with --weight-storage fp8-denoiser: both keep the denoiser's weights in float8, "
            "each its own way; drop one (--fp8-compute keeps the blocks' weights in float8 already)");
  EXPECT_EQ(load_error("tiny-flux-dev", "sometimes", "bf16"),
            "--fp8-compute: expected off, tensorwise or rowwise, got 'sometimes'");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

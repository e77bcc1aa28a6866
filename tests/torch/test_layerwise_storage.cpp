// --weight-storage fp8 layer by layer (issue 26): the Linear and Conv2d layers dpinfer stores in float8 are,
// for every component of every tiny pipeline, exactly those diffusers' layerwise casting hooks store
// (make_fp8_storage_pipelines.py records their names), and a stored layer computes what the hook makes
// its module compute: float8 weights cast to the run dtype for the forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/loading/layerwise_storage.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"
#include "support/param_names.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";

class LayerwiseStorage : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerwiseStorage, StoresTheLayersDiffusersHooksStore) {
  const std::string name = GetParam();
  std::ifstream in(kPipelines + name + ".golden/fp8/cases.json");
  ASSERT_TRUE(in) << name;
  const nlohmann::json recorded = nlohmann::json::parse(in).at("stored_layers");
  ASSERT_FALSE(recorded.empty()) << name;
  const ModelDir model = resolve_model(kPipelines + name, "", nullptr, {});
  for (const auto& [component, names] : recorded.items()) {
    const Component& c = model.at(component);
    const ModelClass* cls = find_model_class(c.class_name);
    ASSERT_NE(cls, nullptr) << c.class_name;
    const auto module = cls->build(c.config, at::TensorOptions().device(at::kMeta));
    std::vector<std::string> ours = layerwise_stored_layers(*module, cls->layerwise_casting_skip);
    std::sort(ours.begin(), ours.end());
    // What dpinfer does not build: the subtrees its loader skips (Qwen2.5-VL's vision tower "visual.*").
    std::vector<std::string> theirs;
    for (const std::string& n : names.get<std::vector<std::string>>()) {
      const bool unbuilt = std::any_of(cls->renames.ignored_prefixes.begin(), cls->renames.ignored_prefixes.end(),
                                       [&](const std::string& p) { return starts_with(n, p + "."); });
      if (!unbuilt) theirs.push_back(n);
    }
    EXPECT_FALSE(ours.empty()) << name << "/" << component;
    EXPECT_EQ(ours, theirs) << name << "/" << component;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LayerwiseStorage,
                         ::testing::Values("tiny-sd1", "tiny-sdxl", "tiny-z-image", "tiny-qwen-image", "tiny-flux-dev",
                                           "tiny-chroma", "tiny-sd3", "tiny-sd3.5-t5"),
                         dpinfer::test::FixtureParamName());

// `dpinfer inspect --memory` counts, per component, the elements the fp8 layers hold: those of the weights and
// biases of the layers diffusers' hooks store, as the component's weight file has them.
TEST(LayerwiseStorage, InspectCountsTheStoredElementsOfTheHookedLayers) {
  const std::string name = "tiny-flux-dev";
  std::ifstream in(kPipelines + name + ".golden/fp8/cases.json");
  const nlohmann::json recorded = nlohmann::json::parse(in).at("stored_layers");
  const InspectReport report = inspect_model(kPipelines + name);
  ASSERT_TRUE(report.ok()) << report.error;
  for (const auto& [component, names] : recorded.items()) {
    const ComponentReport& r = report.component(component);
    int64_t stored = 0;
    for (const std::string& file : r.files) {
      auto f = io::SafetensorsFile::open(file);
      for (const std::string& layer : names.get<std::vector<std::string>>())
        for (const char* leaf : {".weight", ".bias"})
          if (const io::TensorView* t = f->find(layer + leaf)) stored += t->numel();
    }
    EXPECT_GT(stored, 0) << component;
    EXPECT_EQ(r.stored_elements, stored) << component;
    EXPECT_EQ(r.module_elements, r.parameters) << component;  // every tensor of the files loads
  }
  const std::string text = report.memory_text("bf16");
  EXPECT_NE(text.find("transformer (FluxTransformer2DModel)"), std::string::npos) << text;
  EXPECT_THROW(report.memory_text("fp4"), InputError);
}

// The hook's round trip: module.to(float8) at setup, module.to(bf16) before the forward. A stored Linear
// and Conv2d give exactly torch's linear and conv2d on those round-tripped weights and biases.
TEST(LayerwiseStorage, AStoredLayerComputesWithItsWeightsRoundedToFloat8) {
  c10::InferenceMode guard;
  at::manual_seed(0);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  nn::Linear linear(64, 32, true, bf16);
  nn::Conv2d conv(4, 8, 3, 1, 1, true, bf16);
  const at::Tensor lw = at::randn({32, 64}, bf16), lb = at::randn({32}, bf16);
  const at::Tensor cw = at::randn({8, 4, 3, 3}, bf16), cb = at::randn({8}, bf16);
  linear->store_as(at::kFloat8_e4m3fn, at::kBFloat16);
  conv->store_as(at::kFloat8_e4m3fn, at::kBFloat16);
  EXPECT_EQ(linear->weight.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_EQ(conv->bias.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_EQ(linear->compute_dtype(), at::kBFloat16);
  // The registered parameter is the member: what load_weights() fills is what the forward reads.
  for (const auto& p : linear->named_parameters()) EXPECT_EQ(p.value().scalar_type(), at::kFloat8_e4m3fn) << p.key();
  linear->weight.copy_(lw);
  linear->bias.copy_(lb);
  conv->weight.copy_(cw);
  conv->bias.copy_(cb);
  auto round = [](const at::Tensor& t) { return t.to(at::kFloat8_e4m3fn).to(at::kBFloat16); };
  const at::Tensor x = at::randn({2, 5, 64}, bf16), image = at::randn({1, 4, 6, 6}, bf16);
  EXPECT_TRUE(at::equal(linear->forward(x), at::linear(x, round(lw), round(lb))));
  // A non-contiguous input takes the folded path (layers.cpp), still with the rounded weights.
  const at::Tensor xt = at::randn({5, 2, 64}, bf16).transpose(0, 1);
  EXPECT_TRUE(at::equal(linear->forward(xt), at::matmul(xt.reshape({-1, 64}), round(lw).t()).view({2, 5, 32}).add_(round(lb))));
  EXPECT_TRUE(at::equal(conv->forward(image), at::conv2d(image, round(cw), round(cb), {1, 1}, {1, 1})));
  EXPECT_FALSE(at::equal(linear->forward(x), at::linear(x, lw, lb)));
}

// diffusers skips a whole subtree at the first name that matches, anchored patterns included.
TEST(LayerwiseStorage, APatternSkipsItsModuleAndEverythingUnderIt) {
  struct Net : torch::nn::Module {
    Net() {
      const auto o = at::TensorOptions().device(at::kMeta);
      proj_out = register_module("proj_out", nn::Linear(4, 4, true, o));
      block = register_module("block", std::make_shared<torch::nn::Module>());
      block->register_module("norm1", std::make_shared<torch::nn::Module>())
          ->register_module("linear", nn::Linear(4, 4, true, o));
      block->register_module("proj_out", nn::Linear(4, 4, true, o));
      block->register_module("ff", nn::Linear(4, 4, true, o));
      block->register_module("conv", nn::Conv2d(4, 4, 1, 1, 0, true, o));
      block->register_module("t_embedder", nn::Linear(4, 4, true, o));
    }
    nn::Linear proj_out{nullptr};
    std::shared_ptr<torch::nn::Module> block;
  };
  Net net;
  EXPECT_EQ(layerwise_stored_layers(net, {}),
            (std::vector<std::string>{"block.proj_out", "block.ff", "block.conv", "block.t_embedder"}));
  EXPECT_EQ(layerwise_stored_layers(net, {"t_embedder"}),
            (std::vector<std::string>{"block.proj_out", "block.ff", "block.conv"}));
  EXPECT_THROW(parse_weight_storage("fp4"), InputError);
  EXPECT_EQ(parse_weight_storage("default"), at::ScalarType::Undefined);
  EXPECT_EQ(parse_weight_storage("fp8-denoiser"), at::kFloat8_e4m3fn);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// SD3Transformer2DModel against diffusers 0.36.0, on the four tiny random transformers of
// tools/fixtures/make_sd3_transformer_goldens.py (diffusers' own SD3 dummy, an SD3 variant, and two
// SD3.5-like layouts with qk_norm "rms_norm" and dual attention blocks): one forward per case in
// float32 and in bfloat16, with what StableDiffusion3Pipeline passes (latents, prompt and pooled
// embeddings, t.expand(B)), square, non-square and odd latent sizes cropped from the position table,
// loaded the way the pipeline loads them (through the model-class table: built on the meta device,
// keys checked, then filled). Plus the config's one-line errors and the position table's bound.
#include "dpinfer/pipeline/models/transformers/sd3_transformer.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;
using test::model_fixture_dir;

// The bfloat16 runs compare a bfloat16 forward with diffusers' bfloat16 forward; one bfloat16
// rounding step (2^-8) of room for a matmul that sums in another order.
constexpr double kBf16Tolerance = 4e-3;

Component transformer_component(const std::string& name) {
  return test::fixture_component(name, "transformer", ComponentRole::kDenoiser, "SD3Transformer2DModel");
}

std::shared_ptr<SD3Transformer2DModelImpl> load(const std::string& name, at::ScalarType dtype) {
  return load_component_as<SD3Transformer2DModelImpl>(transformer_component(name), at::TensorOptions().dtype(dtype));
}

json golden_cases(const std::string& name) {
  return io::read_json_file(model_fixture_dir(name) + ".golden/cases.json");
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

class SD3Transformer : public ::testing::TestWithParam<std::string> {};

TEST_P(SD3Transformer, ForwardMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden(model_fixture_dir(name) + ".golden/transformer.safetensors");
  const json cases = golden_cases(name).at("cases");
  ASSERT_FALSE(cases.empty());
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto model = load(name, dtype);
    ASSERT_TRUE(model);
    for (const json& c : cases) {
      const at::Tensor x = golden[c.at("hidden_states").get<std::string>()];
      const at::Tensor txt = golden[c.at("encoder_hidden_states").get<std::string>()];
      const at::Tensor pooled = golden[c.at("pooled_projections").get<std::string>()];
      const at::Tensor t = golden[c.at("timestep").get<std::string>()];
      const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
      const at::Tensor out = model->forward(x.to(dtype), txt.to(dtype), pooled.to(dtype), t);
      ASSERT_EQ(out.scalar_type(), dtype);
      const std::string what = name + " " + c.at("name").get<std::string>() + " " + dtype_name;
      expect_close(out, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16Tolerance);
      std::printf("  %-58s max |diff| %.3e (max |ref| %.3e)\n", what.c_str(), max_abs(out, expected),
                  expected.to(at::kDouble).abs().max().item<double>());
    }
  }
}

TEST_P(SD3Transformer, ModelClassRowBuildsAndDescribesIt) {
  const ModelClass* row = find_model_class("SD3Transformer2DModel");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kDenoiser);
  const json config = transformer_component(GetParam()).config;
  const nlohmann::ordered_json facts = row->facts(config);
  EXPECT_EQ(facts.at("num_layers").get<int64_t>(), config.at("num_layers").get<int64_t>());
  EXPECT_EQ(facts.at("qk_norm").is_null(), config.at("qk_norm").is_null());
  auto module = row->build(config, at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta));
  // The position table is in the run dtype, as diffusers as installed by default (with accelerate)
  // casts it (issue 35; without accelerate it would stay float32).
  bool found = false;
  for (const auto& b : module->named_buffers())
    if (b.key() == "pos_embed.pos_embed") {
      found = true;
      EXPECT_EQ(b.value().scalar_type(), at::kBFloat16);
    }
  EXPECT_TRUE(found);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SD3Transformer,
                         ::testing::Values("tiny-sd3-transformer", "tiny-sd3-transformer-alt", "tiny-sd3.5-transformer",
                                           "tiny-sd3.5-transformer-alt"),
                         dpinfer::test::FixtureParamName());

TEST(SD3TransformerConfig, RefusesWhatDiffusersCannotRunInOneLine) {
  json base = test::fixture_component("tiny-sd3.5-transformer", "transformer", ComponentRole::kDenoiser,
                                      "SD3Transformer2DModel")
                  .config;
  auto message = [&](const json& patch) -> std::string {
    json j = base;
    for (const auto& [key, value] : patch.items()) j[key] = value;  // merge_patch would drop a null
    try {
      SD3TransformerConfig::from_json(j);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({{"caption_projection_dim", 16}}).find("caption_projection_dim"), std::string::npos);
  EXPECT_NE(message({{"qk_norm", "layer_norm"}}).find("qk_norm"), std::string::npos);
  EXPECT_NE(message({{"pos_embed_max_size", nullptr}}).find("pos_embed_max_size"), std::string::npos);
  EXPECT_NE(message({{"num_layers", -1}}).find("num_layers"), std::string::npos);
  EXPECT_NE(message({{"dual_attention_layers", "0"}}).find("dual_attention_layers"), std::string::npos);
  EXPECT_EQ(message({{"dual_attention_layers", json::array()}, {"qk_norm", nullptr}}), "");
  const SD3TransformerConfig null_out =
      SD3TransformerConfig::from_json(json::parse(R"({"in_channels": 8, "out_channels": null})"));
  EXPECT_EQ(null_out.out_channels, 8);
}

TEST(SD3TransformerForward, RefusesALatentBeyondThePositionTable) {
  c10::InferenceMode guard;
  auto model = load("tiny-sd3.5-transformer", at::kFloat);  // pos_embed_max_size 10, patch 2
  const auto& c = model->config();
  const at::Tensor x = at::zeros({1, c.in_channels, 22, 8});
  const at::Tensor txt = at::zeros({1, 3, c.joint_attention_dim});
  const at::Tensor pooled = at::zeros({1, c.pooled_projection_dim});
  try {
    model->forward(x, txt, pooled, at::tensor({500.0}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pos_embed_max_size"), std::string::npos) << e.what();
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

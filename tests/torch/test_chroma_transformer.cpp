// ChromaTransformer2DModel against diffusers 0.36.0, on the two tiny random transformers of
// tools/fixtures/make_chroma_transformer_goldens.py (the Chroma dummy and another layout): one forward
// per case in float32 and in bfloat16, with what ChromaPipeline passes (packed latents, T5 states,
// t / 1000, the (0, row, column) image ids, zero text ids, the float text-and-image attention mask;
// also no mask and a bool mask), loaded the way the pipeline loads them (through the model-class
// table: built on the meta device, keys checked, then filled). Plus the config's and the forward's
// one-line errors.
#include "dpinfer/pipeline/models/transformers/chroma_transformer.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;
using test::model_fixture_dir;

// As for Flux: on CPU the bfloat16 forward is bit for bit diffusers' here too (max |diff| 0); the
// bound, one bfloat16 rounding step, leaves room for a matmul summing in another order elsewhere.
constexpr double kBf16Tolerance = 4e-3;

Component transformer_component(const std::string& name) {
  return test::fixture_component(name, "transformer", ComponentRole::kDenoiser, "ChromaTransformer2DModel");
}

std::shared_ptr<ChromaTransformer2DModelImpl> load(const std::string& name, at::ScalarType dtype) {
  return load_component_as<ChromaTransformer2DModelImpl>(transformer_component(name),
                                                         at::TensorOptions().dtype(dtype));
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

class ChromaTransformer : public ::testing::TestWithParam<std::string> {};

TEST_P(ChromaTransformer, ForwardMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden(model_fixture_dir(name) + ".golden/transformer.safetensors");
  const json cases = io::read_json_file(model_fixture_dir(name) + ".golden/cases.json").at("cases");
  ASSERT_FALSE(cases.empty());
  auto tensor = [&](const json& c, const char* key) {
    return c.contains(key) ? golden[c.at(key).get<std::string>()] : at::Tensor();
  };
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto model = load(name, dtype);
    ASSERT_TRUE(model);
    for (const json& c : cases) {
      const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
      // A float mask in the prompt dtype, as the pipeline passes it; a bool one is stored as uint8.
      at::Tensor mask = tensor(c, "attention_mask");
      if (mask.defined()) mask = mask.to(c.value("attention_mask_is_bool", false) ? at::kBool : dtype);
      const at::Tensor out =
          model->forward(tensor(c, "hidden_states").to(dtype), tensor(c, "encoder_hidden_states").to(dtype),
                         tensor(c, "timestep"), tensor(c, "img_ids"), tensor(c, "txt_ids"), mask);
      ASSERT_EQ(out.scalar_type(), dtype);
      const std::string what = name + " " + c.at("name").get<std::string>() + " " + dtype_name;
      expect_close(out, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16Tolerance);
      std::printf("  %-58s max |diff| %.3e (max |ref| %.3e)\n", what.c_str(), max_abs(out, expected),
                  expected.to(at::kDouble).abs().max().item<double>());
      // On CPU the same arithmetic in the same order: float32 is bit for bit diffusers'.
      if (dtype == at::kFloat) test::expect_bit_identical_on_recording_cpu(out, expected, what);
    }
  }
}

TEST_P(ChromaTransformer, ModelClassRowBuildsAndDescribesIt) {
  const ModelClass* row = find_model_class("ChromaTransformer2DModel");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kDenoiser);
  EXPECT_EQ(row->library, "diffusers");
  const json config = transformer_component(GetParam()).config;
  const nlohmann::ordered_json facts = row->facts(config);
  EXPECT_EQ(facts.at("num_layers").get<int64_t>(), config.at("num_layers").get<int64_t>());
  EXPECT_EQ(facts.at("approximator_hidden_dim").get<int64_t>(), config.at("approximator_hidden_dim").get<int64_t>());
  // On the meta device: names and shapes only, equal to diffusers' state_dict keys (the strict load
  // of the forward test checks all of them against the file).
  auto module = row->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const auto params = module->named_parameters();
  for (const char* key :
       {"x_embedder.weight", "context_embedder.bias", "distilled_guidance_layer.in_proj.weight",
        "distilled_guidance_layer.layers.0.linear_1.weight", "distilled_guidance_layer.layers.0.linear_2.bias",
        "distilled_guidance_layer.norms.0.weight", "distilled_guidance_layer.out_proj.bias", "proj_out.bias",
        "transformer_blocks.0.attn.norm_added_k.weight", "transformer_blocks.0.attn.to_add_out.bias",
        "transformer_blocks.0.ff_context.net.2.weight", "single_transformer_blocks.0.proj_mlp.bias",
        "single_transformer_blocks.0.attn.norm_k.weight"})
    EXPECT_TRUE(params.contains(key)) << key;
  // The pruned norms have no Linear; norm_out none at all.
  EXPECT_FALSE(params.contains("transformer_blocks.0.norm1.linear.weight"));
  EXPECT_FALSE(params.contains("single_transformer_blocks.0.norm.linear.weight"));
  EXPECT_FALSE(params.contains("norm_out.linear.weight"));
  // Double block: q/k/v per stream (12), QK norms (4), to_out.0 and to_add_out (4), two MLPs (8).
  // Single block: q/k/v (6), QK norms (2), proj_mlp and proj_out (4). Approximator: in_proj, out_proj
  // (4) and per layer 4 + 1. Outside: x_embedder, context_embedder, proj_out (6).
  const int64_t layers = config.at("approximator_layers").get<int64_t>();
  EXPECT_EQ(static_cast<int64_t>(params.size()), 6 + 4 + 5 * layers + config.at("num_layers").get<int64_t>() * 28 +
                                                     config.at("num_single_layers").get<int64_t>() * 12);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChromaTransformer,
                         ::testing::Values("tiny-chroma-transformer", "tiny-chroma-transformer-alt"),
                         dpinfer::test::FixtureParamName());

TEST(ChromaTransformerConfigTest, DefaultsAreDiffusers) {
  const ChromaTransformerConfig c = ChromaTransformerConfig::from_json(json::object());
  EXPECT_EQ(c.inner_dim(), 3072);
  EXPECT_EQ(c.num_layers, 19);
  EXPECT_EQ(c.num_single_layers, 38);
  EXPECT_EQ(c.joint_attention_dim, 4096);
  EXPECT_EQ(c.approximator_num_channels, 64);
  EXPECT_EQ(c.approximator_hidden_dim, 5120);
  EXPECT_EQ(c.approximator_layers, 5);
  EXPECT_EQ(c.mod_index_length(), 344);  // 3 * 38 + 2 * 6 * 19 + 2, Chroma1-HD's
}

TEST(ChromaTransformerConfigTest, BadConfigsGiveOneLineErrorsNamingTheField) {
  const json base = io::read_json_file(model_fixture_dir("tiny-chroma-transformer") + "/config.json");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"axes_dims_rope", {4, 4, 6}}}, "axes_dims_rope sum to 14, but attention_head_dim is 16"},
      {{{"approximator_num_channels", 10}}, "approximator_num_channels = 10 must be a multiple of 4"},
      {{{"approximator_num_channels", 0}}, "approximator_num_channels = 0 must be in [4, 65536]"},
      {{{"approximator_hidden_dim", 0}}, "approximator_hidden_dim = 0 must be in [1, 65536]"},
      {{{"approximator_layers", 2000}}, "approximator_layers = 2000 must be in [0, 1024]"},
      {{{"num_single_layers", 5000}}, "num_single_layers = 5000 must be in [0, 1024]"},
  };
  for (const auto& [patch, message] : bad) {
    json j = base;
    j.update(patch);
    try {
      ChromaTransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << patch.dump();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("transformer config: "), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(ChromaTransformerConfigTest, InputsTheModelCannotTakeAreRefused) {
  c10::InferenceMode guard;
  auto model = load("tiny-chroma-transformer", at::kFloat);
  // One item: 6 tokens of 4 features, 3 text tokens of 32.
  const at::Tensor x = at::zeros({1, 6, 4}), txt = at::zeros({1, 3, 32}), t = at::zeros({1});
  const at::Tensor img_ids = at::zeros({6, 3}), txt_ids = at::zeros({3, 3}), mask = at::ones({1, 9});
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(model->forward(x, txt, t, img_ids, txt_ids, mask).sizes(), at::IntArrayRef({1, 6, 4}));
  EXPECT_NE(message([&] { model->forward(x, txt, t, img_ids, txt_ids, at::ones({1, 3})); })
                .find("attention_mask must be [1, 9] (text then image tokens)"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(at::zeros({1, 6, 8}), txt, t, img_ids, txt_ids); })
                .find("hidden_states must be [B, L_img, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, at::zeros({1, 3, 16}), t, img_ids, txt_ids); })
                .find("encoder_hidden_states must be [1, L_txt, 32]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, t, at::zeros({5, 3}), txt_ids); }).find("img_ids must be [6, 3]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, at::zeros({2}), img_ids, txt_ids); })
                .find("timestep must be [1] or a scalar"),
            std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

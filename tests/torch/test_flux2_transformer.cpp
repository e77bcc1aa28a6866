// Flux2Transformer2DModel against diffusers 0.37.0 (the FLUX.2 pin), on the two tiny random transformers of
// tools/fixtures/make_flux2_goldens.py ([klein]-like without guidance embeds, [dev]-like with them): one
// forward per case in float32 and in bfloat16, with what Flux2KleinPipeline passes (packed latents, stacked
// text states, t / 1000, the (T, H, W, L) ids, reference-image tokens in one case), loaded the way the
// pipeline loads them (through the model-class table: built on the meta device, keys checked, then
// filled). Plus the config's and the forward's one-line errors.
#include "dpinfer/pipeline/models/transformers/flux2_transformer.h"

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

// On the recording CPU both dtypes are bit for bit diffusers'; the bound, one bfloat16 rounding step, leaves
// room for a matmul summing in another order elsewhere.
constexpr double kBf16Tolerance = 4e-3;

Component transformer_component(const std::string& name) {
  return test::fixture_component(name, "transformer", ComponentRole::kDenoiser, "Flux2Transformer2DModel");
}

std::shared_ptr<Flux2Transformer2DModelImpl> load(const std::string& name, at::ScalarType dtype) {
  return load_component_as<Flux2Transformer2DModelImpl>(transformer_component(name), at::TensorOptions().dtype(dtype));
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

class Flux2Transformer : public ::testing::TestWithParam<std::string> {};

TEST_P(Flux2Transformer, ForwardMatchesDiffusers) {
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
      const at::Tensor guidance = tensor(c, "guidance");
      const at::Tensor out = model->forward(
          tensor(c, "hidden_states").to(dtype), tensor(c, "encoder_hidden_states").to(dtype),
          tensor(c, "timestep").to(dtype), tensor(c, "img_ids"), tensor(c, "txt_ids"),
          guidance.defined() ? guidance.to(dtype) : guidance);
      ASSERT_EQ(out.scalar_type(), dtype);
      const std::string what = name + " " + c.at("name").get<std::string>() + " " + dtype_name;
      expect_close(out, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16Tolerance);
      std::printf("  %-58s max |diff| %.3e (max |ref| %.3e)\n", what.c_str(), max_abs(out, expected),
                  expected.to(at::kDouble).abs().max().item<double>());
      test::expect_bit_identical_on_recording_cpu(out, expected, what);
    }
  }
}

TEST_P(Flux2Transformer, ModelClassRowBuildsItWithDiffusersNames) {
  const ModelClass* row = find_model_class("Flux2Transformer2DModel");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kDenoiser);
  EXPECT_EQ(row->library, "diffusers");
  const json config = transformer_component(GetParam()).config;
  const nlohmann::ordered_json facts = row->facts(config);
  EXPECT_EQ(facts.at("num_single_layers").get<int64_t>(), config.at("num_single_layers").get<int64_t>());
  EXPECT_EQ(facts.at("out_channels").get<int64_t>(), config.at("in_channels").get<int64_t>());
  EXPECT_EQ(facts.at("guidance_embeds").get<bool>(), config.at("guidance_embeds").get<bool>());
  auto module = row->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const auto params = module->named_parameters();
  for (const char* key :
       {"x_embedder.weight", "context_embedder.weight", "time_guidance_embed.timestep_embedder.linear_1.weight",
        "double_stream_modulation_img.linear.weight", "single_stream_modulation.linear.weight",
        "norm_out.linear.weight", "proj_out.weight", "transformer_blocks.0.attn.to_out.0.weight",
        "transformer_blocks.0.attn.norm_added_q.weight", "transformer_blocks.0.ff_context.linear_in.weight",
        "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight", "single_transformer_blocks.0.attn.to_out.weight",
        "single_transformer_blocks.0.attn.norm_k.weight"})
    EXPECT_TRUE(params.contains(key)) << key;
  EXPECT_EQ(params.contains("time_guidance_embed.guidance_embedder.linear_2.weight"),
            config.at("guidance_embeds").get<bool>());
  for (const auto& p : params) EXPECT_EQ(p.key().find(".bias"), std::string::npos) << p.key();  // no biases
  // Double block: 6 projections, 4 QK norms, 2 outputs, 2 x 2 feed-forward Linears (16). Single block:
  // to_qkv_mlp_proj, to_out and 2 QK norms (4). Outside: x and context embedders, 2 timestep Linears (+2
  // guidance), 3 modulations, norm_out, proj_out.
  const int64_t outside = 2 + 2 + 3 + 2 + (config.at("guidance_embeds").get<bool>() ? 2 : 0);
  EXPECT_EQ(static_cast<int64_t>(params.size()), outside + config.at("num_layers").get<int64_t>() * 16 +
                                                     config.at("num_single_layers").get<int64_t>() * 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Flux2Transformer,
                         ::testing::Values("tiny-flux2-transformer", "tiny-flux2-transformer-alt"),
                         dpinfer::test::FixtureParamName());

TEST(Flux2TransformerConfigTest, DefaultsAreDiffusers) {
  const Flux2TransformerConfig c = Flux2TransformerConfig::from_json(json::object());
  EXPECT_EQ(c.inner_dim(), 6144);
  EXPECT_EQ(c.in_channels, 128);
  EXPECT_EQ(c.out_channels, 128);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_single_layers, 48);
  EXPECT_EQ(c.joint_attention_dim, 15360);
  EXPECT_EQ(c.timestep_guidance_channels, 256);
  EXPECT_EQ(c.mlp_hidden_dim(), 18432);
  EXPECT_EQ(c.rope_theta, 2000);
  EXPECT_TRUE(c.guidance_embeds);
  EXPECT_EQ(c.axes_dims_rope, (std::vector<int64_t>{32, 32, 32, 32}));
  EXPECT_EQ(Flux2TransformerConfig::from_json({{"in_channels", 12}, {"out_channels", nullptr}}).out_channels, 12);
}

TEST(Flux2TransformerConfigTest, BadConfigsGiveOneLineErrorsNamingTheField) {
  const json base = io::read_json_file(model_fixture_dir("tiny-flux2-transformer") + "/config.json");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"axes_dims_rope", {4, 4, 4, 2}}}, "axes_dims_rope sum to 14, but attention_head_dim is 16"},
      {{{"axes_dims_rope", {5, 3, 4, 4}}}, "axes_dims_rope[0] = 5 must be even"},
      {{{"axes_dims_rope", {8, 8}}}, "axes_dims_rope must have 4 entries"},
      {{{"mlp_ratio", 0}}, "mlp_ratio must be positive"},
      {{{"rope_theta", -1}}, "rope_theta must be positive"},
      {{{"num_single_layers", 5000}}, "num_single_layers = 5000 must be in [0, 1024]"},
      {{{"timestep_guidance_channels", 0}}, "timestep_guidance_channels = 0 must be in [2, 65536]"},
      {{{"guidance_embeds", "yes"}}, "guidance_embeds must be true or false"},
  };
  for (const auto& [patch, message] : bad) {
    json j = base;
    j.update(patch);
    try {
      Flux2TransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << patch.dump();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("transformer config: "), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(Flux2TransformerConfigTest, InputsTheModelCannotTakeAreRefused) {
  c10::InferenceMode guard;
  auto model = load("tiny-flux2-transformer", at::kFloat);
  const at::Tensor x = at::zeros({1, 6, 16}), txt = at::zeros({1, 3, 24}), t = at::zeros({1});
  const at::Tensor img_ids = at::zeros({6, 4}), txt_ids = at::zeros({1, 3, 4});
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(model->forward(x, txt, t, img_ids, txt_ids).sizes(), at::IntArrayRef({1, 6, 16}));
  EXPECT_NE(message([&] { model->forward(at::zeros({1, 6, 8}), txt, t, img_ids, txt_ids); })
                .find("hidden_states must be [B, L_img, 16]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, at::zeros({1, 3, 7}), t, img_ids, txt_ids); })
                .find("encoder_hidden_states must be [1, L_txt, 24]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, t, at::zeros({6, 3}), txt_ids); }).find("img_ids must be [6, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, at::zeros({2}), img_ids, txt_ids); })
                .find("timestep must be [1] or a scalar"),
            std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// FluxTransformer2DModel against diffusers 0.36.0, on the two tiny random transformers of
// tools/fixtures/make_flux_transformer_goldens.py (diffusers' dummy with guidance embeds, FLUX.1-dev-
// like, and a FLUX.1-schnell-like layout without them): one forward per case in float32 and in
// bfloat16, with what FluxPipeline passes (packed latents, T5 states, CLIP's pooled output, t / 1000,
// the (0, row, column) image ids, zero text ids, guidance), loaded the way the pipeline loads them
// (through the model-class table: built on the meta device, keys checked, then filled). Plus
// FluxPosEmbed against diffusers' own module, and the config's and the forward's one-line errors.
#include "dpinfer/pipeline/models/transformers/flux_transformer.h"

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
#include "dpinfer/pipeline/nn/rope.h"
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

// As for Qwen-Image: on CPU the bfloat16 forward is bit for bit diffusers' here too (max |diff| 0);
// the bound, one bfloat16 rounding step, leaves room for a matmul summing in another order elsewhere.
constexpr double kBf16Tolerance = 4e-3;

Component transformer_component(const std::string& name) {
  return test::fixture_component(name, "transformer", ComponentRole::kDenoiser, "FluxTransformer2DModel");
}

std::shared_ptr<FluxTransformer2DModelImpl> load(const std::string& name, at::ScalarType dtype) {
  return load_component_as<FluxTransformer2DModelImpl>(transformer_component(name), at::TensorOptions().dtype(dtype));
}

json golden_cases(const std::string& name) {
  return io::read_json_file(model_fixture_dir(name) + ".golden/cases.json");
}

GoldenFile golden_file(const std::string& name) {
  return GoldenFile(model_fixture_dir(name) + ".golden/transformer.safetensors");
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

class FluxTransformer : public ::testing::TestWithParam<std::string> {};

TEST_P(FluxTransformer, ForwardMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json cases = golden_cases(name).at("cases");
  ASSERT_FALSE(cases.empty());
  auto tensor = [&](const json& c, const char* key) {
    return c.contains(key) ? golden[c.at(key).get<std::string>()] : at::Tensor();
  };
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto model = load(name, dtype);
    ASSERT_TRUE(model);
    for (const json& c : cases) {
      const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
      const at::Tensor out =
          model->forward(tensor(c, "hidden_states").to(dtype), tensor(c, "encoder_hidden_states").to(dtype),
                         tensor(c, "pooled_projections").to(dtype), tensor(c, "timestep"), tensor(c, "img_ids"),
                         tensor(c, "txt_ids"), tensor(c, "guidance"));
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

TEST_P(FluxTransformer, PosEmbedMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json info = golden_cases(name);
  const FluxTransformerConfig config = FluxTransformerConfig::from_json(transformer_component(name).config);
  // Angles and cos/sin in float64, then rounded: the same bits.
  for (const json& rc : info.at("rope")) {
    const nn::RotaryCosSin f = nn::rotary_cos_sin(golden[rc.at("ids").get<std::string>()],
                                                  FluxTransformer2DModelImpl::kRopeTheta, config.axes_dims_rope);
    const at::Tensor cos = golden[rc.at("cos").get<std::string>()], sin = golden[rc.at("sin").get<std::string>()];
    const std::string what = name + " rope " + rc.at("name").get<std::string>();
    ASSERT_EQ(f.cos.sizes(), cos.sizes()) << what;
    EXPECT_EQ(f.cos.scalar_type(), at::kFloat) << what;
    test::expect_bit_identical_on_recording_cpu(f.cos, cos, what + " cos");
    test::expect_bit_identical_on_recording_cpu(f.sin, sin, what + " sin");
  }
}

TEST_P(FluxTransformer, ModelClassRowBuildsAndDescribesIt) {
  const ModelClass* row = find_model_class("FluxTransformer2DModel");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kDenoiser);
  EXPECT_EQ(row->library, "diffusers");
  const json config = transformer_component(GetParam()).config;
  const nlohmann::ordered_json facts = row->facts(config);
  EXPECT_EQ(facts.at("num_layers").get<int64_t>(), config.at("num_layers").get<int64_t>());
  EXPECT_EQ(facts.at("num_single_layers").get<int64_t>(), config.at("num_single_layers").get<int64_t>());
  EXPECT_EQ(facts.at("inner_dim").get<int64_t>(),
            config.at("num_attention_heads").get<int64_t>() * config.at("attention_head_dim").get<int64_t>());
  EXPECT_EQ(facts.at("out_channels").get<int64_t>(), config.at("in_channels").get<int64_t>());  // null: in_channels
  EXPECT_EQ(facts.at("guidance_embeds").get<bool>(), config.at("guidance_embeds").get<bool>());
  // On the meta device: names and shapes only, equal to diffusers' state_dict keys (the strict load
  // of the forward test checks all of them against the file).
  auto module = row->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const auto params = module->named_parameters();
  for (const char* key :
       {"x_embedder.weight", "context_embedder.bias", "time_text_embed.timestep_embedder.linear_2.weight",
        "time_text_embed.text_embedder.linear_1.weight", "norm_out.linear.weight", "proj_out.bias",
        "transformer_blocks.0.norm1.linear.weight", "transformer_blocks.0.norm1_context.linear.bias",
        "transformer_blocks.0.attn.norm_added_k.weight", "transformer_blocks.0.attn.to_add_out.bias",
        "transformer_blocks.0.attn.to_out.0.weight", "transformer_blocks.0.ff_context.net.2.weight",
        "transformer_blocks.0.ff.net.0.proj.weight", "single_transformer_blocks.0.norm.linear.weight",
        "single_transformer_blocks.0.proj_mlp.bias", "single_transformer_blocks.0.proj_out.weight",
        "single_transformer_blocks.0.attn.norm_k.weight", "single_transformer_blocks.0.attn.to_v.bias"})
    EXPECT_TRUE(params.contains(key)) << key;
  EXPECT_EQ(params.contains("time_text_embed.guidance_embedder.linear_1.weight"),
            config.at("guidance_embeds").get<bool>());
  EXPECT_FALSE(params.contains("single_transformer_blocks.0.attn.to_out.0.weight"));  // pre_only
  // Double block: norm1, norm1_context (4), six q/k/v projections (12), four QK norms (4), to_out.0
  // and to_add_out (4), two MLPs (8). Single block: norm (2), q/k/v (6), QK norms (2), proj_mlp and
  // proj_out (4). Outside: x_embedder, context_embedder, timestep/text embedders (8), guidance
  // embedder (4 when present), norm_out, proj_out.
  const int64_t outside = 2 + 2 + 8 + 2 + 2 + (config.at("guidance_embeds").get<bool>() ? 4 : 0);
  EXPECT_EQ(static_cast<int64_t>(params.size()), outside + config.at("num_layers").get<int64_t>() * 32 +
                                                     config.at("num_single_layers").get<int64_t>() * 14);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FluxTransformer,
                         ::testing::Values("tiny-flux-transformer", "tiny-flux-transformer-alt"),
                         dpinfer::test::FixtureParamName());

TEST(FluxTransformerConfigTest, DefaultsAreDiffusers) {
  const FluxTransformerConfig c = FluxTransformerConfig::from_json(json::object());
  EXPECT_EQ(c.inner_dim(), 3072);
  EXPECT_EQ(c.in_channels, 64);
  EXPECT_EQ(c.out_channels, 64);
  EXPECT_EQ(c.num_layers, 19);
  EXPECT_EQ(c.num_single_layers, 38);
  EXPECT_EQ(c.joint_attention_dim, 4096);
  EXPECT_EQ(c.pooled_projection_dim, 768);
  EXPECT_FALSE(c.guidance_embeds);
  EXPECT_EQ(c.axes_dims_rope, (std::vector<int64_t>{16, 56, 56}));
  EXPECT_EQ(FluxTransformerConfig::from_json({{"in_channels", 12}, {"out_channels", nullptr}}).out_channels, 12);
  EXPECT_EQ(FluxTransformerConfig::from_json({{"in_channels", 12}, {"out_channels", 4}}).out_features(), 4);
}

TEST(FluxTransformerConfigTest, BadConfigsGiveOneLineErrorsNamingTheField) {
  const json base = io::read_json_file(model_fixture_dir("tiny-flux-transformer") + "/config.json");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"axes_dims_rope", {4, 4, 6}}}, "axes_dims_rope sum to 14, but attention_head_dim is 16"},
      {{{"axes_dims_rope", {5, 3, 8}}}, "axes_dims_rope[0] = 5 must be even"},
      {{{"axes_dims_rope", {8, 8}}}, "axes_dims_rope must have 3 entries"},
      {{{"patch_size", 0}}, "patch_size = 0 must be in [1, 64]"},
      {{{"num_attention_heads", 8192}}, "num_attention_heads * attention_head_dim = 131072 must be at most 65536"},
      {{{"num_single_layers", 5000}}, "num_single_layers = 5000 must be in [0, 1024]"},
      {{{"pooled_projection_dim", 0}}, "pooled_projection_dim = 0 must be in [1, 65536]"},
      {{{"joint_attention_dim", -3}}, "joint_attention_dim = -3 must be in [1, 65536]"},
      {{{"out_channels", -1}}, "out_channels = -1 must be in [1, 65536]"},
      {{{"in_channels", 2.5}}, "in_channels must be an integer"},
      {{{"guidance_embeds", "yes"}}, "guidance_embeds must be true or false"},
  };
  for (const auto& [patch, message] : bad) {
    json j = base;
    j.update(patch);
    try {
      FluxTransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << patch.dump();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("transformer config: "), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(FluxTransformerConfigTest, InputsTheModelCannotTakeAreRefused) {
  c10::InferenceMode guard;
  auto dev = load("tiny-flux-transformer", at::kFloat);      // guidance embeds
  auto schnell = load("tiny-flux-transformer-alt", at::kFloat);  // none
  // One item: 6 tokens of 4 features, 3 text tokens of 32, pooled 32.
  const at::Tensor x = at::zeros({1, 6, 4}), txt = at::zeros({1, 3, 32}), pooled = at::zeros({1, 32});
  const at::Tensor t = at::zeros({1}), g = at::full({1}, 3.5), img_ids = at::zeros({6, 3}), txt_ids = at::zeros({3, 3});
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(dev->forward(x, txt, pooled, t, img_ids, txt_ids, g).sizes(), at::IntArrayRef({1, 6, 4}));
  EXPECT_NE(message([&] { dev->forward(x, txt, pooled, t, img_ids, txt_ids); }).find("needs a guidance value"),
            std::string::npos);
  EXPECT_NE(message([&] { schnell->forward(at::zeros({1, 6, 64}), at::zeros({1, 3, 40}), at::zeros({1, 24}), t,
                                           img_ids, txt_ids, g); })
                .find("takes no guidance value"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->forward(at::zeros({1, 6, 8}), txt, pooled, t, img_ids, txt_ids, g); })
                .find("hidden_states must be [B, L_img, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->forward(x, txt, at::zeros({1, 16}), t, img_ids, txt_ids, g); })
                .find("pooled_projections must be [1, 32]"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->forward(x, txt, pooled, t, at::zeros({5, 3}), txt_ids, g); })
                .find("img_ids must be [6, 3]"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->forward(x, txt, pooled, t, img_ids, at::zeros({3, 2}), g); })
                .find("txt_ids must be [3, 3]"),
            std::string::npos);
  EXPECT_NE(message([&] { dev->forward(x, txt, pooled, at::zeros({2}), img_ids, txt_ids, g); })
                .find("timestep must be [1] or a scalar"),
            std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

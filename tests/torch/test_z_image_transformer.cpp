// ZImageTransformer2DModel against diffusers 0.36.0, on the two tiny random transformers of
// tools/fixtures/make_z_image_goldens.py (diffusers' own dummy and another layout): one forward
// per case in float32 and in bfloat16, two batch items with captions of different lengths and
// latents whose patch count is not a multiple of 32, loaded the way the pipeline loads them
// (through the model-class table: built on the meta device, keys checked, then filled). Plus
// the DiT-kit units against diffusers' own functions, and the config's one-line errors.
#include "dpinfer/pipeline/models/transformers/z_image_transformer.h"

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
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/pipeline/nn/patchify.h"
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

// The bfloat16 runs compare a bfloat16 forward with diffusers' bfloat16 forward. On CPU both are bit
// for bit equal to diffusers' (as is float32); the bound, one bfloat16 rounding step (2^-8), leaves
// room for a matmul that sums in another order on another machine or thread count.
constexpr double kBf16Tolerance = 4e-3;

Component transformer_component(const std::string& name) {
  return test::fixture_component(name, "transformer", ComponentRole::kDenoiser, "ZImageTransformer2DModel");
}

json golden_cases(const std::string& name) { return io::read_json_file(model_fixture_dir(name) + ".golden/cases.json"); }

GoldenFile golden_file(const std::string& name) {
  return GoldenFile(model_fixture_dir(name) + ".golden/transformer.safetensors");
}

std::vector<int64_t> lengths_of(const at::Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t[i].item<int64_t>();
  return v;
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

class ZImageTransformer : public ::testing::TestWithParam<std::string> {};

TEST_P(ZImageTransformer, ForwardMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json cases = golden_cases(name).at("cases");
  ASSERT_FALSE(cases.empty());
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto model = load_component_as<ZImageTransformer2DModelImpl>(transformer_component(name),
                                                                 at::TensorOptions().dtype(dtype));
    ASSERT_TRUE(model);
    for (const json& c : cases) {
      const at::Tensor x = golden[c.at("x").get<std::string>()];
      const at::Tensor t = golden[c.at("t").get<std::string>()];
      const at::Tensor caps = golden[c.at("cap_feats").get<std::string>()];
      const std::vector<int64_t> lens = lengths_of(golden[c.at("cap_lens").get<std::string>()]);
      const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
      const at::Tensor out = model->forward(x.to(dtype), t, caps.to(dtype), lens, c.at("patch_size").get<int64_t>(),
                                            c.at("f_patch_size").get<int64_t>());
      ASSERT_EQ(out.scalar_type(), dtype);
      const std::string what = name + " " + c.at("name").get<std::string>() + " " + dtype_name;
      expect_close(out, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16Tolerance);
      std::printf("  %-58s max |diff| %.3e (max |ref| %.3e)\n", what.c_str(), max_abs(out, expected),
                  expected.to(at::kDouble).abs().max().item<double>());
      if (dtype == at::kFloat && x.size(2) == 1) {
        // [B, C, H, W] latents (one frame, as the pipeline holds them) give the same, without the F axis.
        const at::Tensor out4 = model->forward(x.squeeze(2), t, caps, lens, c.at("patch_size").get<int64_t>(),
                                               c.at("f_patch_size").get<int64_t>());
        EXPECT_TRUE(at::equal(out4, out.squeeze(2))) << what;
      }
    }
  }
}

TEST_P(ZImageTransformer, RopeAndTimestepFeaturesMatchDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const ZImageTransformerConfig config = ZImageTransformerConfig::from_json(transformer_component(name).config);
  // RopeEmbedder: float64 frequencies and angles, float32 polar, complex64; the same arithmetic bit for bit.
  nn::AxialRope rope(config.rope_theta, config.axes_dims, config.axes_lens);
  const at::Tensor freqs = rope(golden["rope.ids"]);
  ASSERT_EQ(freqs.scalar_type(), at::kComplexFloat);
  const at::Tensor expected_freqs = golden["rope.freqs"];
  test::expect_bit_identical_on_recording_cpu(at::view_as_real(freqs), expected_freqs, name + " rope");
  // TimestepEmbedder.timestep_embedding(t * t_scale, 256): cos first, float32, bit for bit.
  const at::Tensor temb = nn::timestep_embedding(golden["temb.t"], 256, true, 0.0);
  test::expect_bit_identical_on_recording_cpu(temb, golden["temb.freq"], name + " temb");
}

// diffusers pads each caption to a multiple of 32 with cap_pad_token (attended like real tokens) and
// masks only the padding across the batch; so an item's output does not depend on its batch-mates,
// up to the float rounding of matmuls and attention over other shapes (more, masked, keys): about
// 6e-7 relative here, bounded at 1e-5.
TEST_P(ZImageTransformer, ItemsAloneMatchTheirRowsInTheBatch) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json c = golden_cases(name).at("cases").at(0);
  auto model = load_component_as<ZImageTransformer2DModelImpl>(transformer_component(name),
                                                               at::TensorOptions().dtype(at::kFloat));
  const at::Tensor x = golden[c.at("x").get<std::string>()], t = golden[c.at("t").get<std::string>()];
  const at::Tensor caps = golden[c.at("cap_feats").get<std::string>()];
  const std::vector<int64_t> lens = lengths_of(golden[c.at("cap_lens").get<std::string>()]);
  const int64_t p = c.at("patch_size").get<int64_t>(), pf = c.at("f_patch_size").get<int64_t>();
  const at::Tensor batched = model->forward(x, t, caps, lens, p, pf);
  for (int64_t i = 0; i < x.size(0); ++i) {
    const int64_t len = lens[static_cast<size_t>(i)];
    const at::Tensor alone = model->forward(x.narrow(0, i, 1), t.narrow(0, i, 1),
                                            caps.narrow(0, i, 1).narrow(1, 0, len), {len}, p, pf);
    expect_close(alone, batched.narrow(0, i, 1), name + " item " + std::to_string(i) + " alone vs in the batch", 1e-5);
  }
}

TEST_P(ZImageTransformer, ModelClassRowBuildsAndDescribesIt) {
  const ModelClass* row = find_model_class("ZImageTransformer2DModel");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kDenoiser);
  const json config = transformer_component(GetParam()).config;
  const nlohmann::ordered_json facts = row->facts(config);
  EXPECT_EQ(facts.at("dim").get<int64_t>(), config.at("dim").get<int64_t>());
  EXPECT_EQ(facts.at("axes_dims").get<std::vector<int64_t>>(), config.at("axes_dims").get<std::vector<int64_t>>());
  // On the meta device: names and shapes only, equal to diffusers' state_dict keys.
  auto module = row->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const auto params = module->named_parameters();
  EXPECT_TRUE(params.contains("x_pad_token") && params.contains("cap_pad_token"));
  EXPECT_TRUE(params.contains("t_embedder.mlp.2.weight") && params.contains("cap_embedder.0.weight"));
  EXPECT_TRUE(params.contains("all_final_layer.2-1.adaLN_modulation.1.weight"));
  EXPECT_TRUE(params.contains("layers.0.adaLN_modulation.0.weight"));
  EXPECT_FALSE(params.contains("context_refiner.0.adaLN_modulation.0.weight"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ZImageTransformer, ::testing::Values("tiny-z-image", "tiny-z-image-alt"),
                         dpinfer::test::FixtureParamName());

TEST(ZImageKit, RotaryEmbeddingRotatesInterleavedPairsInFloat32) {
  c10::InferenceMode guard;
  // One head of 4: pairs (x0, x1) and (x2, x3), rotated by 90 and 180 degrees.
  const at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4});
  const at::Tensor angles = at::tensor({1.5707963267948966f, 3.141592653589793f}).view({1, 1, 2});
  const at::Tensor freqs = at::polar(at::ones_like(angles), angles);
  const at::Tensor out = nn::apply_rotary_emb_complex(x, freqs).view({4});
  const at::Tensor expected = at::tensor({-2.0f, 1.0f, -3.0f, -4.0f});
  EXPECT_TRUE(at::allclose(out, expected, 0, 1e-6)) << out;
  // A bfloat16 input is rotated in float32 and rounded once.
  const at::Tensor out_bf16 = nn::apply_rotary_emb_complex(x.to(at::kBFloat16), freqs);
  EXPECT_EQ(out_bf16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(out_bf16, nn::apply_rotary_emb_complex(x, freqs).to(at::kBFloat16)));
}

TEST(ZImageKit, PatchifyIsDiffusersLayoutAndUnpatchifyInvertsIt) {
  c10::InferenceMode guard;
  const at::Tensor x = at::arange(2 * 3 * 2 * 4 * 6, at::kFloat).view({2, 3, 2, 4, 6});  // [B, C, F, H, W]
  const at::Tensor tokens = nn::patchify_fhw(x, 2, 2);
  ASSERT_EQ(tokens.sizes().vec(), (std::vector<int64_t>{2, 1 * 2 * 3, 2 * 2 * 2 * 3}));
  // Token (f 0, h 1, w 2) of item 1; feature (pf 1, ph 0, pw 1, c 2) = x[1, 2, 1, 2, 5].
  const int64_t token = 1 * 3 + 2, feature = ((1 * 2 + 0) * 2 + 1) * 3 + 2;
  EXPECT_EQ(tokens[1][token][feature].item<float>(), x[1][2][1][2][5].item<float>());
  EXPECT_TRUE(at::equal(nn::unpatchify_fhw(tokens, 3, 2, 4, 6, 2, 2), x));
}

TEST(ZImageTransformerConfigTest, DefaultsAreZImageTurbosShapes) {
  const ZImageTransformerConfig c = ZImageTransformerConfig::from_json(json::object());
  EXPECT_EQ(c.dim, 3840);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.ffn_hidden_dim(), 10240);
  EXPECT_EQ(c.adaln_embed_dim(), 256);
  EXPECT_EQ(c.axes_lens, (std::vector<int64_t>{1024, 512, 512}));
}

TEST(ZImageTransformerConfigTest, BadConfigsGiveOneLineErrorsNamingTheField) {
  const json base = io::read_json_file(model_fixture_dir("tiny-z-image") + "/config.json");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"axes_dims", {8, 4, 6}}}, "axes_dims sum to 18, but the head dim dim / n_heads is 16"},
      {{{"axes_dims", {7, 5, 4}}}, "axes_dims[0] = 7 must be even"},
      {{{"axes_dims", {8, 8}}}, "axes_dims must have 3 entries"},
      {{{"axes_lens", {256, 32}}}, "axes_lens must have one entry per axes_dims entry"},
      {{{"all_f_patch_size", {1, 1}}}, "all_f_patch_size must have one entry per all_patch_size entry"},
      {{{"all_patch_size", {2, 2}}, {"all_f_patch_size", {1, 1}}}, "all_patch_size[1] repeats"},
      {{{"n_heads", 3}}, "dim = 32 must be divisible by n_heads = 3"},
      {{{"dim", 1 << 20}}, "dim = 1048576 must be in [1, 65536]"},
      {{{"n_layers", 100000}}, "n_layers = 100000 must be in [0, 1024]"},
      {{{"cap_feat_dim", 0}}, "cap_feat_dim = 0 must be in [1, 65536]"},
      {{{"axes_lens", {256, 32, -1}}}, "axes_lens[2] = -1 must be in [1, 1048576]"},
      {{{"norm_eps", 0}}, "norm_eps must be positive"},
      {{{"qk_norm", "yes"}}, "qk_norm"},
  };
  for (const auto& [patch, message] : bad) {
    json j = base;
    j.update(patch);
    try {
      ZImageTransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << patch.dump();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("transformer config: "), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(ZImageTransformerConfigTest, InputsTheModelCannotTakeAreRefused) {
  c10::InferenceMode guard;
  auto model = load_component_as<ZImageTransformer2DModelImpl>(transformer_component("tiny-z-image"),
                                                               at::TensorOptions().dtype(at::kFloat));
  ASSERT_TRUE(model);
  const at::Tensor x = at::zeros({1, 16, 1, 4, 4}), t = at::zeros({1}), caps = at::zeros({1, 3, 16});
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([&] { model->forward(x, t, caps, {3}, 1, 1); }).find("no x embedder for patch_size 1"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, t, caps, {4}); }).find("caption length 4 is outside [1, 3]"),
            std::string::npos);
  // axes_lens [256, 32, 32]: 17x17 patches need height position 16 < 32, fine; 33 rows of patches do not.
  EXPECT_NE(message([&] { model->forward(at::zeros({1, 16, 1, 66, 2}), t, caps, {3}); }).find("beyond axes_lens"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(at::zeros({1, 4, 1, 4, 4}), t, caps, {3}); }).find("16 channels"),
            std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// QwenImageTransformer2DModel against diffusers 0.36.0, on the two tiny random transformers of
// tools/fixtures/make_qwen_image_transformer_goldens.py (diffusers' own dummy and another layout):
// one forward per case in float32 and in bfloat16, with what QwenImagePipeline passes (prompts of
// different lengths zero-padded to the longest with their mask, t / 1000, img_shapes, txt_seq_lens;
// non-square, odd, multi-segment and two-frame image grids), loaded the way the pipeline loads them
// (through the model-class table: built on the meta device, keys checked, then filled). Plus MSRoPE
// and the timestep projection against diffusers' own modules, the text-padding modes, and the
// config's one-line errors.
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer.h"

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
#include "dpinfer/pipeline/nn/ms_rope.h"
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

// The bfloat16 runs compare a bfloat16 forward with diffusers' bfloat16 forward. On CPU (one or
// more threads) both are bit for bit equal: max |diff| 0 in every case, as in float32, where the
// test asserts it on the CPU that recorded the golden (fixture_cpu.h). The bfloat16 bound, one bfloat16 rounding step (2^-8), leaves room for a
// matmul that sums in another order on another machine.
constexpr double kBf16Tolerance = 4e-3;

Component transformer_component(const std::string& name) {
  return test::fixture_component(name, "transformer", ComponentRole::kDenoiser, "QwenImageTransformer2DModel");
}

std::shared_ptr<QwenImageTransformer2DModelImpl> load(const std::string& name, at::ScalarType dtype) {
  return load_component_as<QwenImageTransformer2DModelImpl>(transformer_component(name),
                                                            at::TensorOptions().dtype(dtype));
}

json golden_cases(const std::string& name) {
  return io::read_json_file(model_fixture_dir(name) + ".golden/cases.json");
}

GoldenFile golden_file(const std::string& name) {
  return GoldenFile(model_fixture_dir(name) + ".golden/transformer.safetensors");
}

std::vector<nn::TokenGrid> grids_of(const json& shapes) {
  std::vector<nn::TokenGrid> grids;
  for (const json& s : shapes)
    grids.push_back({s.at(0).get<int64_t>(), s.at(1).get<int64_t>(), s.at(2).get<int64_t>()});
  return grids;
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// One golden case's inputs, as the pipeline would pass them.
struct Inputs {
  at::Tensor x, txt, mask, t;
  std::vector<std::vector<nn::TokenGrid>> img_shapes;
  std::vector<int64_t> txt_seq_lens;
};

Inputs inputs_of(const GoldenFile& golden, const json& c) {
  Inputs in{golden[c.at("hidden_states").get<std::string>()], golden[c.at("encoder_hidden_states").get<std::string>()],
            golden[c.at("encoder_hidden_states_mask").get<std::string>()], golden[c.at("timestep").get<std::string>()],
            {}, c.at("txt_seq_lens").get<std::vector<int64_t>>()};
  in.img_shapes.assign(static_cast<size_t>(in.x.size(0)), grids_of(c.at("img_shapes")));
  return in;
}

class QwenImageTransformer : public ::testing::TestWithParam<std::string> {};

TEST_P(QwenImageTransformer, ForwardMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json cases = golden_cases(name).at("cases");
  ASSERT_FALSE(cases.empty());
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto model = load(name, dtype);
    ASSERT_TRUE(model);
    for (const json& c : cases) {
      const Inputs in = inputs_of(golden, c);
      const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
      const at::Tensor out = model->forward(in.x.to(dtype), in.txt.to(dtype), in.mask, in.t, in.img_shapes,
                                            in.txt_seq_lens);
      ASSERT_EQ(out.scalar_type(), dtype);
      const std::string what = name + " " + c.at("name").get<std::string>() + " " + dtype_name;
      expect_close(out, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16Tolerance);
      std::printf("  %-58s max |diff| %.3e (max |ref| %.3e)\n", what.c_str(), max_abs(out, expected),
                  expected.to(at::kDouble).abs().max().item<double>());
      // On CPU the same arithmetic in the same order: float32 is bit for bit diffusers' on the
      // CPU that recorded the golden (fixture_cpu.h).
      if (dtype == at::kFloat) test::expect_bit_identical_on_recording_cpu(out, expected, what);
    }
  }
}

TEST_P(QwenImageTransformer, MSRopeAndTimestepProjectionMatchDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json info = golden_cases(name);
  const QwenImageTransformerConfig config = QwenImageTransformerConfig::from_json(transformer_component(name).config);
  // QwenEmbedRope: float32 tables, torch.polar, complex64, only looked up: the same bits.
  nn::MSRope rope(QwenImageTransformer2DModelImpl::kRopeTheta, config.axes_dims_rope);
  for (const json& rc : info.at("rope")) {
    const nn::MSRope::Freqs freqs =
        rope(grids_of(rc.at("img_shapes")), rc.at("txt_len").get<int64_t>(), at::Device(at::kCPU));
    ASSERT_EQ(freqs.image.scalar_type(), at::kComplexFloat);
    const int64_t stride = rc.at("stride").get<int64_t>();
    const at::Tensor image = at::view_as_real(freqs.image).slice(0, 0, freqs.image.size(0), stride);
    const at::Tensor text = at::view_as_real(freqs.text).slice(0, 0, freqs.text.size(0), stride);
    const at::Tensor expected_image = golden[rc.at("img").get<std::string>()];
    const at::Tensor expected_text = golden[rc.at("txt").get<std::string>()];
    const std::string what = name + " rope " + rc.at("name").get<std::string>();
    ASSERT_EQ(image.sizes(), expected_image.sizes()) << what;
    ASSERT_EQ(text.sizes(), expected_text.sizes()) << what;
    test::expect_bit_identical_on_recording_cpu(image, expected_image, what + " image");
    test::expect_bit_identical_on_recording_cpu(text, expected_text, what + " text");
  }
  // Timesteps(256, flip_sin_to_cos, shift 0, scale 1000): scale applied after t * f, float32, bit for bit;
  // and on t rounded to bfloat16, as the model rounds it in a bfloat16 run.
  for (const auto& [t_name, proj_name] :
       {std::pair{"temb.t", "temb.proj"}, std::pair{"temb.t_bf16", "temb.proj_bf16"}}) {
    const at::Tensor proj = nn::timestep_embedding(golden[t_name], 256, true, 0.0, 1000.0);
    test::expect_bit_identical_on_recording_cpu(proj, golden[proj_name], name + " " + proj_name);
  }
}

// diffusers 0.36.0 never uses encoder_hidden_states_mask: a prompt padded with zero rows (which
// txt_norm keeps zero and txt_in turns into its bias) gives another output than the same prompt
// alone (relative error 6.1e-2 and 5.6e-2 here). kMasked masks the padding keys: then an item alone
// matches its row of the padded batch up to the rounding of matmuls and attention of other shapes
// (about 2e-7 relative here), bounded at 1e-5. An unpadded item matches in both modes.
TEST_P(QwenImageTransformer, TextPaddingIsAttendedAsInDiffusersOrMasked) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json c = golden_cases(name).at("cases").at(0);
  auto model = load(name, at::kFloat);
  const Inputs in = inputs_of(golden, c);
  ASSERT_GE(in.x.size(0), 2);
  const at::Tensor attended = model->forward(in.x, in.txt, in.mask, in.t, in.img_shapes, in.txt_seq_lens);
  const at::Tensor masked =
      model->forward(in.x, in.txt, in.mask, in.t, in.img_shapes, in.txt_seq_lens, QwenTextPadding::kMasked);
  const int64_t text_len = in.txt.size(1);
  for (int64_t i = 0; i < in.x.size(0); ++i) {
    const int64_t len = in.txt_seq_lens[static_cast<size_t>(i)];
    const at::Tensor x = in.x.narrow(0, i, 1), t = in.t.narrow(0, i, 1);
    const at::Tensor txt = in.txt.narrow(0, i, 1).narrow(1, 0, len), mask = in.mask.narrow(0, i, 1).narrow(1, 0, len);
    const at::Tensor alone = model->forward(x, txt, mask, t, {in.img_shapes[0]}, {len});
    const std::string what = name + " item " + std::to_string(i) + " (" + std::to_string(len) + " of " +
                             std::to_string(text_len) + " tokens) alone vs in the batch";
    if (len == text_len) {
      // Not padded: the same (but for the batch's other shapes in the matmuls), and both modes agree.
      expect_close(alone, attended.narrow(0, i, 1), what + ", attended", 1e-5);
    } else {
      const double err = test::relative_error(alone, attended.narrow(0, i, 1));
      EXPECT_GT(err, 1e-3) << what << ", attended";
      std::printf("  %-58s rel err %.3e (padding attended: differs)\n", (what + ", attended").c_str(), err);
    }
    expect_close(alone, masked.narrow(0, i, 1), what + ", masked", 1e-5);
  }
}

TEST_P(QwenImageTransformer, ModelClassRowBuildsAndDescribesIt) {
  const ModelClass* row = find_model_class("QwenImageTransformer2DModel");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kDenoiser);
  EXPECT_EQ(row->library, "diffusers");
  const json config = transformer_component(GetParam()).config;
  const nlohmann::ordered_json facts = row->facts(config);
  EXPECT_EQ(facts.at("num_layers").get<int64_t>(), config.at("num_layers").get<int64_t>());
  EXPECT_EQ(facts.at("inner_dim").get<int64_t>(),
            config.at("num_attention_heads").get<int64_t>() * config.at("attention_head_dim").get<int64_t>());
  EXPECT_EQ(facts.at("axes_dims_rope").get<std::vector<int64_t>>(),
            config.at("axes_dims_rope").get<std::vector<int64_t>>());
  EXPECT_EQ(facts.at("guidance_embeds").get<bool>(), config.at("guidance_embeds").get<bool>());
  // On the meta device: names and shapes only, equal to diffusers' state_dict keys (the strict load
  // of the forward test checks all of them against the file).
  auto module = row->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const auto params = module->named_parameters();
  for (const char* key : {"img_in.weight", "txt_norm.weight", "txt_in.bias",
                          "time_text_embed.timestep_embedder.linear_2.weight", "norm_out.linear.weight",
                          "proj_out.bias", "transformer_blocks.0.img_mod.1.weight",
                          "transformer_blocks.0.attn.norm_added_k.weight", "transformer_blocks.0.attn.to_add_out.bias",
                          "transformer_blocks.0.attn.to_out.0.weight", "transformer_blocks.0.txt_mlp.net.2.weight",
                          "transformer_blocks.0.img_mlp.net.0.proj.weight"})
    EXPECT_TRUE(params.contains(key)) << key;
  // Per block: img_mod/txt_mod (4), six q/k/v projections (12), four QK norms (4), to_out.0 and
  // to_add_out (4), two MLPs (8). Outside: img_in, txt_norm, txt_in, timestep_embedder, norm_out, proj_out.
  const int64_t per_block = 4 + 12 + 4 + 4 + 8;
  const int64_t layers = config.at("num_layers").get<int64_t>();
  EXPECT_EQ(static_cast<int64_t>(params.size()), 13 + layers * per_block);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QwenImageTransformer,
                         ::testing::Values("tiny-qwen-image-transformer", "tiny-qwen-image-transformer-alt"),
                         dpinfer::test::FixtureParamName());

TEST(QwenImageTransformerConfigTest, DefaultsAreDiffusers) {
  const QwenImageTransformerConfig c = QwenImageTransformerConfig::from_json(json::object());
  EXPECT_EQ(c.inner_dim(), 3072);
  EXPECT_EQ(c.in_channels, 64);
  EXPECT_EQ(c.out_channels, 16);
  EXPECT_EQ(c.out_features(), 64);
  EXPECT_EQ(c.num_layers, 60);
  EXPECT_EQ(c.axes_dims_rope, (std::vector<int64_t>{16, 56, 56}));
  // out_channels null (or 0) means in_channels; absent, diffusers' default 16.
  EXPECT_EQ(QwenImageTransformerConfig::from_json({{"in_channels", 12}, {"out_channels", nullptr}}).out_channels, 12);
  EXPECT_EQ(QwenImageTransformerConfig::from_json({{"in_channels", 12}}).out_channels, 16);
}

TEST(QwenImageTransformerConfigTest, BadConfigsGiveOneLineErrorsNamingTheField) {
  const json base = io::read_json_file(model_fixture_dir("tiny-qwen-image-transformer") + "/config.json");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"axes_dims_rope", {8, 4, 6}}}, "axes_dims_rope sum to 18, but attention_head_dim is 16"},
      {{{"axes_dims_rope", {7, 5, 4}}}, "axes_dims_rope[0] = 7 must be even"},
      {{{"axes_dims_rope", {8, 8}}}, "axes_dims_rope must have 3 entries"},
      {{{"axes_dims_rope", {8, 0, 8}}}, "axes_dims_rope[1] = 0 must be in [1, 65536]"},
      {{{"patch_size", 0}}, "patch_size = 0 must be in [1, 64]"},
      {{{"num_attention_heads", 1 << 20}}, "num_attention_heads = 1048576 must be in [1, 65536]"},
      {{{"num_attention_heads", 8192}}, "num_attention_heads * attention_head_dim = 131072 must be at most 65536"},
      {{{"num_layers", 100000}}, "num_layers = 100000 must be in [0, 1024]"},
      {{{"joint_attention_dim", -3}}, "joint_attention_dim = -3 must be in [1, 65536]"},
      {{{"out_channels", -1}}, "out_channels = -1 must be in [1, 65536]"},
      {{{"in_channels", 2.5}}, "in_channels must be an integer"},
      {{{"guidance_embeds", "yes"}}, "guidance_embeds must be true or false"},
  };
  for (const auto& [patch, message] : bad) {
    json j = base;
    j.update(patch);
    try {
      QwenImageTransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << patch.dump();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("transformer config: "), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(QwenImageTransformerConfigTest, InputsTheModelCannotTakeAreRefused) {
  c10::InferenceMode guard;
  auto model = load("tiny-qwen-image-transformer", at::kFloat);
  ASSERT_TRUE(model);
  // One item: a 2x3 grid (6 tokens of 16 features), 4 text tokens of 16.
  const at::Tensor x = at::zeros({1, 6, 16}), txt = at::zeros({1, 4, 16}), mask = at::ones({1, 4}, at::kLong);
  const at::Tensor t = at::zeros({1});
  const std::vector<std::vector<nn::TokenGrid>> shapes{{{1, 2, 3}}};
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(model->forward(x, txt, mask, t, shapes, {4}).sizes(), at::IntArrayRef({1, 6, 16}));
  EXPECT_NE(message([&] { model->forward(at::zeros({1, 6, 8}), txt, mask, t, shapes, {4}); })
                .find("hidden_states must be [B, L_img, 16]"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, mask, t, {{{1, 3, 3}}}, {4}); })
                .find("img_shapes[0] holds 9 tokens, but hidden_states has 6"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, mask, t, shapes, {3}); })
                .find("the longest txt_seq_lens entry must be L_txt = 4"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, mask, t, shapes, {4, 4}); }).find("one entry per batch item"),
            std::string::npos);
  EXPECT_NE(message([&] { model->forward(x, txt, at::ones({1, 5}), t, shapes, {4}); })
                .find("encoder_hidden_states_mask must be [1, 4]"),
            std::string::npos);
  const at::Tensor x2 = at::zeros({2, 6, 16}), txt2 = at::zeros({2, 4, 16});
  EXPECT_NE(message([&] { model->forward(x2, txt2, {}, at::zeros({2}), {{{1, 2, 3}}, {{1, 3, 2}}}, {4, 4}); })
                .find("img_shapes[1] differs from img_shapes[0]"),
            std::string::npos);
  // 2 x 8194: the centred width needs position -4097, beyond the 4096-entry tables.
  EXPECT_NE(message([&] { model->forward(at::zeros({1, 2 * 8194, 16}), txt, mask, t, {{{1, 2, 8194}}}, {4}); })
                .find("beyond the 4096-entry rope tables"),
            std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

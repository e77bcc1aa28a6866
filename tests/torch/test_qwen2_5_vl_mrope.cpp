// Qwen2.5-VL's text model with image tokens (Qwen-Image-Edit's prompt, issue 29) against transformers, on the
// goldens of tools/fixtures/make_qwen2_5_vl_mrope_goldens.py: get_rope_index's 3D positions, and
// hidden_states[-1] / hidden_states[mid] of Qwen2_5_VLForConditionalGeneration.forward with image features
// scattered over the image tokens, for tiny-qwen2.5-vl (nested text_config), tiny-qwen2.5-vl-alt (flat layout)
// and tiny-qwen2.5-vl-merge2 (spatial_merge_size 2), in fp32 and bf16; then batch independence, the text-only
// equivalence, hand-checked positions, the config fields and the errors.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/pipeline/models/text_encoders/qwen2_5_vl_rope_index.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::GoldenFile;
using test::model_fixture_dir;
using Grids = std::vector<std::array<int64_t, 3>>;

// Against transformers 4.57.6 on torch 2.11.0 every case is bit-identical on this project's x86-64 CPUs, in
// fp32 and bf16 (the same ATen calls on the same values: M-RoPE's channel choice before cos/sin is elementwise).
// The bounds leave room for another BLAS or thread count, as test_decoder_llm_text_encoder.cpp's do.
constexpr double kFp32Tolerance = 1e-6;
constexpr double kBf16Tolerance = 1e-2;
constexpr int64_t kVisionStart = 494, kVisionEnd = 495, kImage = 496, kVideo = 497;  // the fixtures' ids

const std::vector<std::string>& golden_cases() {
  static const std::vector<std::string> cases = {"right", "left", "two_images", "alone"};
  return cases;
}

std::string golden_dir(const std::string& name) { return model_fixture_dir(name) + ".mrope-golden"; }

Component text_encoder_component(const std::string& name) {
  const json cases = io::read_json_file(golden_dir(name) + "/cases.json", "regenerate it");
  Component c;
  c.name = "text_encoder";
  c.role = ComponentRole::kTextEncoder;
  c.library = "transformers";
  c.class_name = cases.at("class").get<std::string>();
  c.path = model_fixture_dir(name);
  c.config = io::read_json_file(c.path + "/config.json", "regenerate it");
  return c;
}

std::shared_ptr<DecoderLLMTextEncoderImpl> load(const std::string& name, at::ScalarType dtype) {
  auto model = load_component_as<DecoderLLMTextEncoderImpl>(text_encoder_component(name),
                                                              at::TensorOptions().dtype(dtype));
  if (!model) throw std::runtime_error("not a DecoderLLMTextEncoder: " + name);
  return model;
}

Grids grids_of(const at::Tensor& grid_thw) {  // [N, 3] int64
  Grids out;
  for (int64_t i = 0; i < grid_thw.size(0); ++i)
    out.push_back({grid_thw[i][0].item<int64_t>(), grid_thw[i][1].item<int64_t>(), grid_thw[i][2].item<int64_t>()});
  return out;
}

// A [rows, values / rows] tensor of `dtype` from int64 values.
at::Tensor int_tensor(const std::vector<int64_t>& values, int64_t rows, at::ScalarType dtype = at::kLong) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).view({rows, -1}).to(dtype);
}

Qwen2_5_VLVisionTokens vision_tokens(const DecoderLLMConfig& c) {
  Qwen2_5_VLVisionTokens t;
  t.image_token_id = c.image_token_id;
  t.vision_start_token_id = c.vision_start_token_id;
  t.video_token_id = c.video_token_id;
  t.spatial_merge_size = c.spatial_merge_size;
  return t;
}

using test::expect_close;

class Qwen2_5_VLMropeGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen2_5_VLMropeGoldens, PositionsMatchTransformers) {
  const std::string name = GetParam();
  GoldenFile golden(golden_dir(name) + "/text_encoder.safetensors");
  const DecoderLLMConfig config = DecoderLLMConfig::qwen2_5_vl_from_file(model_fixture_dir(name) + "/config.json");
  for (const std::string& c : golden_cases()) {
    const Qwen2_5_VLRopeIndex index = qwen2_5_vl_rope_index(
        golden[c + ".input_ids"], golden[c + ".attention_mask"], grids_of(golden[c + ".image_grid_thw"]),
        vision_tokens(config));
    EXPECT_EQ(index.position_ids.scalar_type(), at::kLong);
    EXPECT_TRUE(at::equal(index.position_ids, golden[c + ".position_ids"])) << name << " " << c;
    EXPECT_TRUE(at::equal(index.rope_deltas, golden[c + ".rope_deltas"])) << name << " " << c;
  }
}

TEST_P(Qwen2_5_VLMropeGoldens, HiddenStatesMatchTransformers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  GoldenFile golden(golden_dir(name) + "/text_encoder.safetensors");
  const json info = io::read_json_file(golden_dir(name) + "/cases.json", "regenerate it");
  const int64_t mid = info.at("mid_index").get<int64_t>();
  for (const auto& [dtype, dname, tolerance] : {std::tuple{at::kFloat, "fp32", kFp32Tolerance},
                                                std::tuple{at::kBFloat16, "bf16", kBf16Tolerance}}) {
    auto model = load(name, dtype);
    for (const std::string& c : golden_cases()) {
      const at::Tensor ids = golden[c + ".input_ids"], mask = golden[c + ".attention_mask"];
      const at::Tensor embeds = golden[c + ".image_embeds"];
      const Grids grids = grids_of(golden[c + ".image_grid_thw"]);
      const std::string prefix = c + "." + dname + ".hidden_states_";
      const std::string what = name + " " + c + " " + dname;
      const std::vector<at::Tensor> states = model->hidden_states_with_images(ids, mask, embeds, grids, {-1, mid});
      EXPECT_EQ(states[0].scalar_type(), dtype);
      expect_close(states[0], golden[prefix + "last"], what + " [-1]", tolerance);
      expect_close(states[1], golden[prefix + "mid"], what + " [" + std::to_string(mid) + "]", tolerance);
      // One index at a time runs the same layers: the same values.
      EXPECT_TRUE(at::equal(model->hidden_state_with_images(ids, mask, embeds, grids, mid), states[1])) << what;
      if (c == "alone") {  // no mask is the all-ones mask
        EXPECT_TRUE(at::equal(model->hidden_state_with_images(ids, at::Tensor(), embeds, grids), states[0])) << what;
      }
    }
  }
}

// A row's states are those of the row alone (its padding removed, its own images and features): the batch
// changes neither its positions nor, beyond rounding, its values. Not bit for bit: a padded batch runs SDPA with
// a mask and a row alone without one (is_causal), and the GEMMs change shape, so the sums round differently,
// in transformers as here. Measured: fp32 within 3.7e-7 relative L2, bf16 within 6.8e-3 (under one bf16
// rounding, 7.8e-3); the unpadded longest row is bit-identical in most cases.
TEST_P(Qwen2_5_VLMropeGoldens, RowsDoNotDependOnBatchMates) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  GoldenFile golden(golden_dir(name) + "/text_encoder.safetensors");
  for (const auto& [dtype, dname, tolerance] : {std::tuple{at::kFloat, "fp32", kFp32Tolerance},
                                                std::tuple{at::kBFloat16, "bf16", kBf16Tolerance}}) {
    auto model = load(name, dtype);
    const Qwen2_5_VLVisionTokens tokens = vision_tokens(model->config());
    for (const std::string c : {"right", "left", "two_images"}) {
      const at::Tensor ids = golden[c + ".input_ids"], mask = golden[c + ".attention_mask"];
      const at::Tensor embeds = golden[c + ".image_embeds"];
      const Grids grids = grids_of(golden[c + ".image_grid_thw"]);
      const at::Tensor batch = model->hidden_state_with_images(ids, mask, embeds, grids, -1);
      const at::Tensor batch_positions = golden[c + ".position_ids"];
      int64_t first_feature = 0, first_grid = 0;
      for (int64_t r = 0; r < ids.size(0); ++r) {
        const at::Tensor valid = mask[r].ne(0);
        const at::Tensor row = ids[r].masked_select(valid).unsqueeze(0);  // [1, n]
        const int64_t features = row.eq(kImage).sum().item<int64_t>();
        const int64_t images = row.eq(kVisionStart).sum().item<int64_t>();
        const Grids row_grids(grids.begin() + first_grid, grids.begin() + first_grid + images);
        const at::Tensor row_embeds = embeds.slice(0, first_feature, first_feature + features);
        first_feature += features;
        first_grid += images;
        const std::string what = name + " " + c + " row " + std::to_string(r) + " " + dname;
        const at::Tensor alone_positions = qwen2_5_vl_rope_index(row, at::Tensor(), row_grids, tokens).position_ids;
        const at::Tensor row_positions = batch_positions.select(1, r).index({at::indexing::Slice(), valid});  // [3, n]
        EXPECT_TRUE(at::equal(alone_positions.squeeze(1), row_positions)) << what;
        const at::Tensor alone = model->hidden_state_with_images(row, at::Tensor(), row_embeds, row_grids, -1);
        expect_close(batch[r].index({valid}), alone[0], what + " alone", tolerance);
      }
      EXPECT_EQ(first_feature, embeds.size(0));
      EXPECT_EQ(first_grid, static_cast<int64_t>(grids.size()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Qwen2_5_VLMropeGoldens,
                         ::testing::Values("tiny-qwen2.5-vl", "tiny-qwen2.5-vl-alt", "tiny-qwen2.5-vl-merge2"),
                         dpinfer::test::FixtureParamName());

// With no image the 3D positions are the text ones (three equal rows, cumsum(mask) - 1 with padding at 1)
// and M-RoPE is 1D RoPE: the image entry point gives hidden_state()'s values bit for bit.
TEST(Qwen2_5_VLMrope, WithoutImagesEqualsTheTextPath) {
  c10::InferenceMode guard;
  for (const std::string name : {"tiny-qwen2.5-vl", "tiny-qwen2.5-vl-alt"}) {
    GoldenFile golden(model_fixture_dir(name) + ".golden/text_encoder.safetensors");
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      auto model = load(name, dtype);
      for (const std::string c : {"right", "left", "alone"}) {
        const at::Tensor ids = golden[c + ".input_ids"], mask = golden[c + ".attention_mask"];
        const std::vector<at::Tensor> text = model->hidden_states(ids, mask, {-1, -2});
        const std::vector<at::Tensor> images = model->hidden_states_with_images(ids, mask, at::Tensor(), {}, {-1, -2});
        EXPECT_TRUE(at::equal(text[0], images[0]) && at::equal(text[1], images[1])) << name << " " << c;
      }
    }
  }
}

// transformers' get_rope_index on these inputs (checked by hand and with transformers 4.57.6): an image of
// t = 2 frames keeps temporal index 0 for both, merge 2 halves h and w, a row may end on its image, and a
// left-padded row's padding holds 1.
TEST(Qwen2_5_VLMrope, RopeIndexByHand) {
  Qwen2_5_VLVisionTokens tokens;
  tokens.image_token_id = kImage;
  tokens.vision_start_token_id = kVisionStart;
  tokens.video_token_id = kVideo;
  tokens.spatial_merge_size = 2;
  const int64_t I = kImage, S = kVisionStart, E = kVisionEnd, P = 499;
  const at::Tensor ids = int_tensor({10, S, I, I, I, I, E, 11, P, P, P, P, P, P, S, I}, 2, at::kInt);
  const at::Tensor mask = int_tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1}, 2, at::kBool);
  const Qwen2_5_VLRopeIndex index = qwen2_5_vl_rope_index(ids, mask, {{2, 2, 4}, {1, 2, 2}}, tokens);
  const at::Tensor want = int_tensor({0, 1, 2, 2, 2, 2, 4, 5, 1, 1, 1, 1, 1, 1, 0, 1,   // temporal
                                      0, 1, 2, 2, 2, 2, 4, 5, 1, 1, 1, 1, 1, 1, 0, 1,   // height
                                      0, 1, 2, 3, 2, 3, 4, 5, 1, 1, 1, 1, 1, 1, 0, 1},  // width
                                     6)
                              .view({3, 2, 8});
  EXPECT_TRUE(at::equal(index.position_ids, want)) << index.position_ids;
  EXPECT_TRUE(at::equal(index.rope_deltas, int_tensor({-2, -6}, 2))) << index.rope_deltas;
  // An integer mask: only 1 counts as a token, as transformers' attention_mask == 1.
  EXPECT_TRUE(at::equal(qwen2_5_vl_rope_index(ids, mask.to(at::kLong), {{2, 2, 4}, {1, 2, 2}}, tokens).position_ids,
                        want));
}

// Each error is one line naming what is wrong.
void expect_error(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one with '" << needle << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(Qwen2_5_VLMrope, RopeIndexRefusesWhatTransformersCannotRun) {
  Qwen2_5_VLVisionTokens tokens;
  tokens.image_token_id = kImage;
  tokens.vision_start_token_id = kVisionStart;
  tokens.video_token_id = kVideo;
  tokens.spatial_merge_size = 1;
  const int64_t I = kImage, S = kVisionStart, E = kVisionEnd;
  const at::Tensor one = int_tensor({5, S, I, I, E}, 1);
  expect_error([&] { qwen2_5_vl_rope_index(one, at::Tensor(), {}, tokens); }, "more images than the 0 grids");
  expect_error([&] { qwen2_5_vl_rope_index(one, at::Tensor(), {{1, 1, 2}, {1, 1, 1}}, tokens); },
               "2 image grids for 1 images");
  expect_error([&] { qwen2_5_vl_rope_index(one, at::Tensor(), {{1, 2, 2}}, tokens); }, "runs past the row's 5 tokens");
  expect_error([&] { qwen2_5_vl_rope_index(int_tensor({5, S}, 1), at::Tensor(), {}, tokens); },
               "ends with <|vision_start|>");
  expect_error(
      [&] { qwen2_5_vl_rope_index(int_tensor({5, S, kVideo, E}, 1), at::Tensor(), {}, tokens); },
      "holds a video");
  expect_error([&] { qwen2_5_vl_rope_index(one, at::zeros({1, 5}, at::kLong), {}, tokens); }, "has no tokens");
  expect_error([&] { qwen2_5_vl_rope_index(one, at::Tensor(), {{0, 1, 2}}, tokens); }, "must have t >= 1");
}

TEST(Qwen2_5_VLMrope, CountMismatchesAreOneLineErrors) {
  c10::InferenceMode guard;
  const std::string name = "tiny-qwen2.5-vl-merge2";
  GoldenFile golden(golden_dir(name) + "/text_encoder.safetensors");
  auto model = load(name, at::kFloat);
  const at::Tensor ids = golden["right.input_ids"], mask = golden["right.attention_mask"];
  const at::Tensor embeds = golden["right.image_embeds"];
  const Grids grids = grids_of(golden["right.image_grid_thw"]);
  const int64_t n = embeds.size(0);
  expect_error([&] { model->hidden_state_with_images(ids, mask, embeds.slice(0, 1), grids); },
               "image features and image tokens do not match: " + std::to_string(n) + " image tokens");
  expect_error([&] { model->hidden_state_with_images(ids, mask, at::Tensor(), {}); },
               "do not match: " + std::to_string(n) + " image tokens (id 496) in input_ids, 0 rows");
  expect_error([&] { model->hidden_state_with_images(ids, mask, embeds, Grids(grids.begin(), grids.end() - 1)); },
               "image grids make");
  Grids odd = grids;
  odd[0][1] += 1;  // not a multiple of spatial_merge_size 2
  expect_error([&] { model->hidden_state_with_images(ids, mask, embeds, odd); }, "multiples of spatial_merge_size = 2");
  expect_error([&] { model->hidden_state_with_images(ids, mask, embeds.narrow(1, 0, 8), grids); },
               "image_embeds must be a floating tensor");
}

TEST(Qwen2_5_VLMrope, ConfigReadsTheImageFieldsInBothLayouts) {
  const DecoderLLMConfig nested =
      DecoderLLMConfig::qwen2_5_vl_from_file(model_fixture_dir("tiny-qwen2.5-vl") + "/config.json");
  EXPECT_EQ(nested.image_token_id, kImage);
  EXPECT_EQ(nested.video_token_id, kVideo);
  EXPECT_EQ(nested.vision_start_token_id, kVisionStart);
  EXPECT_EQ(nested.spatial_merge_size, 1);
  EXPECT_EQ(nested.tokens_per_second, 4.0);
  const DecoderLLMConfig flat =
      DecoderLLMConfig::qwen2_5_vl_from_file(model_fixture_dir("tiny-qwen2.5-vl-alt") + "/config.json");
  EXPECT_EQ(flat.image_token_id, kImage);
  EXPECT_EQ(flat.vision_start_token_id, kVisionStart);
  EXPECT_EQ(flat.spatial_merge_size, 1);
  EXPECT_EQ(flat.mrope_section, (std::vector<int64_t>{2, 2, 2}));
  const DecoderLLMConfig merge2 =
      DecoderLLMConfig::qwen2_5_vl_from_file(model_fixture_dir("tiny-qwen2.5-vl-merge2") + "/config.json");
  EXPECT_EQ(merge2.spatial_merge_size, 2);
  EXPECT_EQ(merge2.tokens_per_second, 2.0);
  EXPECT_EQ(merge2.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  // Qwen2_5_VLConfig's defaults; a text_config's own image_token_id loses to the top level's (or its default):
  // Qwen2_5_VLConfig.__setattr__ writes the top-level argument into the text config.
  json j = {{"text_config", {{"rope_scaling", {{"mrope_section", {16, 24, 24}}}}, {"image_token_id", 7}}}};
  const DecoderLLMConfig defaults = DecoderLLMConfig::qwen2_5_vl_from_json(j);
  EXPECT_EQ(defaults.image_token_id, 151655);
  EXPECT_EQ(defaults.video_token_id, 151656);
  EXPECT_EQ(defaults.vision_start_token_id, 151652);
  EXPECT_EQ(defaults.spatial_merge_size, 2);
  EXPECT_EQ(defaults.tokens_per_second, 4.0);
  j["image_token_id"] = 9;
  EXPECT_EQ(DecoderLLMConfig::qwen2_5_vl_from_json(j).image_token_id, 9);
  j["vision_config"] = {{"spatial_merge_size", 0}};
  expect_error([&] { DecoderLLMConfig::qwen2_5_vl_from_json(j); }, "spatial_merge_size must be positive");
  j["vision_config"] = {{"tokens_per_second", "Infinity"}};  // Python's json writes float("inf") so
  expect_error([&] { DecoderLLMConfig::qwen2_5_vl_from_json(j); }, "tokens_per_second must be a finite number");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

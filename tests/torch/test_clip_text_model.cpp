// CLIPTextModel against transformers: the fixture pipelines' text encoders on the golden
// token ids (last_hidden_state and clip_skip), and the config errors.
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using test::expect_close;
using test::GoldenFile;
using test::pipeline_dir;

CLIPTextModel load_text_encoder(const std::string& pipeline, const std::string& variant = "") {
  const std::string dir = pipeline_dir(pipeline) + "/text_encoder";
  CLIPTextModel model(CLIPTextConfig::from_file(dir + "/config.json"));
  load_weights(*model, find_weight_files(dir, variant).files, find_model_class("CLIPTextModel")->renames, "text_encoder");
  model->eval();
  return model;
}

void expect_matches_transformers(const std::string& pipeline) {
  c10::InferenceMode guard;
  CLIPTextModel model = load_text_encoder(pipeline);
  GoldenFile golden(pipeline, "text_encoder.safetensors");
  at::Tensor ids = golden["text.input_ids"];

  CLIPTextModelOutput out = model->forward(ids, /*output_hidden_states=*/true);
  expect_close(out.last_hidden_state, golden["text.last_hidden_state"], pipeline + " last_hidden_state");
  ASSERT_EQ(out.hidden_states.size(), static_cast<size_t>(model->config().num_hidden_layers + 1));
  expect_close(model->encode(ids, 1), golden["text.clip_skip_1"], pipeline + " clip_skip 1");
  expect_close(model->encode(ids, 0), golden["text.last_hidden_state"], pipeline + " clip_skip 0");
  EXPECT_EQ(out.pooler_output.sizes(), (std::vector<int64_t>{ids.size(0), model->config().hidden_size}));
}

TEST(CLIPTextModel, MatchesTransformersOnTinySD1) { expect_matches_transformers("tiny-sd1"); }
TEST(CLIPTextModel, MatchesTransformersOnTinySD2V) { expect_matches_transformers("tiny-sd2v"); }
TEST(CLIPTextModel, MatchesTransformersOnTiny3Down) { expect_matches_transformers("tiny-3down"); }

TEST(CLIPTextModel, Fp16VariantWeightsLoadIntoFloat32AsInDiffusers) {
  c10::InferenceMode guard;
  CLIPTextModel model = load_text_encoder("tiny-sd2v", "fp16");
  GoldenFile golden("tiny-sd2v", "text_encoder.safetensors");
  expect_close(model->forward(golden["text.input_ids"]).last_hidden_state,
               golden["text.last_hidden_state_fp16_variant"], "tiny-sd2v fp16 variant last_hidden_state");
}

TEST(CLIPTextModel, HiddenStatesStartWithTheEmbeddingsAndSkipFinalLayerNorm) {
  c10::InferenceMode guard;
  CLIPTextModel model = load_text_encoder("tiny-sd1");
  at::Tensor ids = GoldenFile("tiny-sd1", "text_encoder.safetensors")["text.input_ids"];
  CLIPTextModelOutput out = model->forward(ids, true);
  const int64_t layers = model->config().num_hidden_layers;
  // encode(ids, clip_skip) is final_layer_norm(hidden_states[-(clip_skip + 1)]) for every clip_skip.
  for (int64_t skip = 0; skip <= layers; ++skip) {
    at::Tensor h = out.hidden_states[static_cast<size_t>(layers - skip)];
    at::Tensor expected = at::layer_norm(h, {h.size(-1)},
                                         model->named_parameters()["text_model.final_layer_norm.weight"],
                                         model->named_parameters()["text_model.final_layer_norm.bias"], 1e-5);
    EXPECT_TRUE(at::allclose(model->encode(ids, skip), expected, 1e-5, 1e-6)) << "clip_skip " << skip;
  }
  EXPECT_TRUE(model->forward(ids).hidden_states.empty());
}

TEST(CLIPTextModel, CausalMaskIgnoresLaterTokens) {
  c10::InferenceMode guard;
  CLIPTextModel model = load_text_encoder("tiny-sd1");
  at::Tensor ids = GoldenFile("tiny-sd1", "text_encoder.safetensors")["text.input_ids"].slice(0, 0, 1).clone();
  at::Tensor changed = ids.clone();
  changed.index_put_({0, 76}, 7);
  at::Tensor a = model->encode(ids), b = model->encode(changed);
  EXPECT_TRUE(at::equal(a.slice(1, 0, 76), b.slice(1, 0, 76)));
  EXPECT_FALSE(at::equal(a.slice(1, 76), b.slice(1, 76)));
}

TEST(CLIPTextModel, ParameterNamesAreTheCheckpointKeys) {
  CLIPTextConfig config = CLIPTextConfig::from_file(pipeline_dir("tiny-sd1") + "/text_encoder/config.json");
  CLIPTextModel model(config);
  auto params = model->named_parameters();
  for (const char* key : {"text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
                          "text_model.encoder.layers.0.self_attn.q_proj.bias",
                          "text_model.encoder.layers.2.mlp.fc2.weight", "text_model.final_layer_norm.weight"})
    EXPECT_TRUE(params.contains(key)) << key;
  EXPECT_EQ(static_cast<int64_t>(params.size()), 4 + config.num_hidden_layers * 16);
  EXPECT_TRUE(model->named_buffers().is_empty());
}

TEST(CLIPTextModel, RejectsBadInputs) {
  c10::InferenceMode guard;
  CLIPTextModel model(CLIPTextConfig::from_file(pipeline_dir("tiny-sd1") + "/text_encoder/config.json"));
  EXPECT_THROW(model->encode(at::zeros({1, 78}, at::kLong)), Error);
  EXPECT_THROW(model->encode(at::zeros({1, 77}, at::kFloat)), Error);
  try {
    model->encode(at::zeros({1, 77}, at::kLong), 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "text encoder: clip_skip 4 is out of range; expected 0 to 3 (num_hidden_layers)");
  }
}

std::string config_error(const nlohmann::json& j) {
  try {
    CLIPTextConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CLIPTextModel, ConfigErrorsNameTheField) {
  EXPECT_EQ(config_error({{"hidden_act", "relu"}}),
            "text encoder config: hidden_act 'relu' is not supported; supported: quick_gelu, gelu");
  EXPECT_EQ(config_error({{"hidden_size", 30}, {"num_attention_heads", 4}}),
            "text encoder config: hidden_size = 30 must be divisible by num_attention_heads = 4");
  EXPECT_EQ(config_error({{"num_hidden_layers", "2"}}),
            "text encoder config: num_hidden_layers must be an integer, got '2'");
  CLIPTextConfig gelu = CLIPTextConfig::from_json({{"hidden_act", "gelu"}});
  EXPECT_EQ(gelu.hidden_act, CLIPTextConfig::Activation::kGELU);
}

TEST(CLIPTextModel, RunsInHalfAndBFloat16OnTheCpu) {
  c10::InferenceMode guard;
  CLIPTextModel model = load_text_encoder("tiny-sd2v");
  GoldenFile golden("tiny-sd2v", "text_encoder.safetensors");
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    model->to(dtype);
    at::Tensor out = model->encode(golden["text.input_ids"], 1);
    EXPECT_EQ(out.scalar_type(), dtype);
    expect_close(out, golden["text.clip_skip_1"], std::string("tiny-sd2v cpu clip_skip 1 ") + c10::toString(dtype),
                 dtype == at::kHalf ? 5e-3 : 3e-2);
  }
}

TEST(CLIPTextModel, RunsInEveryPrecisionOnTheGpu_CUDA) {
  c10::InferenceMode guard;
  for (const std::string& pipeline : test::fixture_pipelines()) {
    CLIPTextModel model = load_text_encoder(pipeline);
    GoldenFile golden(pipeline, "text_encoder.safetensors");
    at::Tensor ids = golden["text.input_ids"].to(at::kCUDA);
    for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      model->to(at::kCUDA, dtype);
      double tolerance = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 5e-3 : 3e-2;
      expect_close(model->encode(ids), golden["text.last_hidden_state"],
                   pipeline + " cuda " + std::string(c10::toString(dtype)), tolerance);
      expect_close(model->encode(ids, 1), golden["text.clip_skip_1"],
                   pipeline + " cuda clip_skip " + std::string(c10::toString(dtype)), tolerance);
    }
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

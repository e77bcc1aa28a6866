// T5EncoderModel (FLUX.1's text_encoder_2, SD3's text_encoder_3, Chroma's text_encoder) against
// transformers 4.57.6 on the tiny models of tools/fixtures/make_t5_goldens.py: last_hidden_state of a
// padded batch of 3 without a mask (FLUX/SD3), the same with the tokenizer's mask (Chroma) and one
// unpadded 35-token prompt, in fp32, bf16 and fp16 (wo kept in fp32), loaded the way a pipeline loads
// them (meta build, key check, fill); the tied embedding under either name; then config errors.
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/text/t5_tokenizer.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::GoldenFile;
using test::model_fixture_dir;

// Against transformers 4.57.6 on torch 2.11.0 every case is bit-identical on this project's x86-64
// CPUs in fp32, bf16 and fp16 (the same ATen calls in the same order and dtypes; the test prints
// max |d| = 0). The tolerances leave room for another BLAS or thread count: fp32 1e-6 relative L2,
// bf16/fp16 a few roundings.
constexpr double kFp32Tolerance = 1e-6;
constexpr double kHalfTolerance = 1e-2;

Component t5_component(const std::string& name) {
  const std::string dir = model_fixture_dir(name);
  Component c;
  c.name = "text_encoder_2";
  c.role = ComponentRole::kTextEncoder;
  c.library = "transformers";
  c.class_name = "T5EncoderModel";
  c.path = dir;
  c.config = io::read_json_file(dir + "/config.json", "regenerate it");
  return c;
}

std::shared_ptr<T5EncoderModelImpl> load(const std::string& name, at::ScalarType dtype) {
  auto model = load_component_as<T5EncoderModelImpl>(t5_component(name), at::TensorOptions().dtype(dtype));
  if (!model) throw std::runtime_error("not a T5EncoderModel: " + name);
  return model;
}

using test::expect_close;

class T5Goldens : public ::testing::TestWithParam<std::string> {};

TEST_P(T5Goldens, LastHiddenStateMatchesTransformers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const std::string golden_name = name == "tiny-t5-both-embeddings" ? "tiny-t5" : name;
  GoldenFile golden(model_fixture_dir(golden_name) + ".golden/text_encoder.safetensors");
  for (const auto& [dtype, dname, tolerance] : {std::tuple{at::kFloat, "fp32", kFp32Tolerance},
                                                std::tuple{at::kBFloat16, "bf16", kHalfTolerance},
                                                std::tuple{at::kHalf, "fp16", kHalfTolerance}}) {
    auto model = load(name, dtype);
    for (const std::string c : {"padded", "masked", "alone"}) {
      const at::Tensor ids = golden[c + ".input_ids"];
      const at::Tensor mask = c == "masked" ? golden[c + ".attention_mask"] : at::Tensor();
      const at::Tensor out = model->forward(ids, mask);
      EXPECT_EQ(out.scalar_type(), dtype) << name << " " << c << " " << dname;
      expect_close(out, golden[c + "." + dname + ".last_hidden_state"], name + " " + c + " " + dname, tolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, T5Goldens, ::testing::Values("tiny-t5", "tiny-t5-alt", "tiny-t5-both-embeddings"),
                         dpinfer::test::FixtureParamName());

// The fixture's ids are the test tokenizer's: a pipeline's path from text to embeddings.
TEST(T5EncoderModel, TokenizerGivesTheGoldenIds) {
  c10::InferenceMode guard;
  const T5Tokenizer tok = T5Tokenizer::from_dir(std::string(DPINFER_TEST_DATA_DIR) + "/tokenizer/t5");
  GoldenFile golden(model_fixture_dir("tiny-t5") + ".golden/text_encoder.safetensors");
  const at::Tensor ids = golden["masked.input_ids"], mask = golden["masked.attention_mask"];
  const char* prompts[] = {"a photo of a cat sitting on a red car in front of a house, golden hour",
                           "一只猫 <extra_id_3> café", ""};
  for (int64_t b = 0; b < 3; ++b) {
    const Encoding e = tok.encode(prompts[b], 24);
    EXPECT_TRUE(at::equal(at::tensor(e.ids, at::kLong), ids[b])) << b;
    EXPECT_TRUE(at::equal(at::tensor(e.attention_mask, at::kLong), mask[b])) << b;
  }
}

// A mask of all ones is no mask; padding changes nothing in the real tokens' rows of a masked run.
TEST(T5EncoderModel, MaskSemantics) {
  c10::InferenceMode guard;
  auto model = load("tiny-t5", at::kFloat);
  GoldenFile golden(model_fixture_dir("tiny-t5") + ".golden/text_encoder.safetensors");
  const at::Tensor ids = golden["alone.input_ids"];
  const at::Tensor plain = model->forward(ids);
  EXPECT_TRUE(at::equal(model->forward(ids, at::ones_like(ids)), plain));
  EXPECT_TRUE(at::equal(model->forward(ids, at::ones_like(ids).to(at::kBool)), plain));
  const at::Tensor padded = at::cat({ids, at::zeros({1, 5}, ids.options())}, 1);
  const at::Tensor mask = at::cat({at::ones_like(ids), at::zeros({1, 5}, ids.options())}, 1);
  const at::Tensor masked = model->forward(padded, mask).narrow(1, 0, ids.size(1));
  EXPECT_LT((masked - plain).abs().max().item<double>(), 1e-5);
}

TEST(T5EncoderModel, ConfigsResolveAsTransformersReadsThem) {
  const T5Config c = T5Config::from_file(model_fixture_dir("tiny-t5") + "/config.json");
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.inner_dim(), 32);
  EXPECT_TRUE(c.is_gated_act);
  EXPECT_EQ(c.dense_act_fn, T5Config::Activation::kGELUNew);
  const T5Config alt = T5Config::from_file(model_fixture_dir("tiny-t5-alt") + "/config.json");
  EXPECT_EQ(alt.inner_dim(), 36);
  EXPECT_FALSE(alt.is_gated_act);
  EXPECT_EQ(alt.dense_act_fn, T5Config::Activation::kReLU);
  EXPECT_EQ(alt.relative_attention_num_buckets, 16);
  EXPECT_EQ(alt.relative_attention_max_distance, 20);
  // Without is_gated_act / dense_act_fn keys, feed_forward_proj decides (gated-gelu is gelu_new).
  const T5Config bare = T5Config::from_json(json{{"feed_forward_proj", "gated-gelu"}});
  EXPECT_TRUE(bare.is_gated_act);
  EXPECT_EQ(bare.dense_act_fn, T5Config::Activation::kGELUNew);
  EXPECT_EQ(T5Config::from_json(json{{"feed_forward_proj", "gated-gelu"}, {"dense_act_fn", "gelu"}}).dense_act_fn,
            T5Config::Activation::kGELU);
  const T5Config defaults = T5Config::from_json(json::object());
  EXPECT_FALSE(defaults.is_gated_act);
  EXPECT_EQ(defaults.dense_act_fn, T5Config::Activation::kReLU);
}

std::string config_error(const json& j) {
  try {
    T5Config::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(T5EncoderModel, BadConfigsNameTheField) {
  EXPECT_NE(config_error({{"feed_forward_proj", "gated-gelu-x"}}).find("feed_forward_proj"), std::string::npos);
  EXPECT_NE(config_error({{"feed_forward_proj", "tanh"}}).find("feed_forward_proj"), std::string::npos);
  EXPECT_NE(config_error({{"dense_act_fn", "mish"}}).find("dense_act_fn"), std::string::npos);
  EXPECT_NE(config_error({{"d_model", 0}}).find("d_model"), std::string::npos);
  EXPECT_NE(config_error({{"num_heads", "8"}}).find("num_heads"), std::string::npos);
  EXPECT_NE(config_error({{"relative_attention_num_buckets", 2}}).find("relative_attention_num_buckets"),
            std::string::npos);
  EXPECT_NE(config_error({{"relative_attention_max_distance", 4}}).find("relative_attention_max_distance"),
            std::string::npos);
  EXPECT_NE(config_error({{"layer_norm_epsilon", -1}}).find("layer_norm_epsilon"), std::string::npos);
}

TEST(T5EncoderModel, BadInputsAreRefused) {
  c10::InferenceMode guard;
  auto model = load("tiny-t5", at::kFloat);
  EXPECT_THROW(model->forward(at::zeros({3}, at::kLong)), Error);
  EXPECT_THROW(model->forward(at::zeros({1, 0}, at::kLong)), Error);
  EXPECT_THROW(model->forward(at::zeros({1, 4}, at::kFloat)), Error);
  EXPECT_THROW(model->forward(at::full({1, 4}, 1100, at::kLong)), Error);
  EXPECT_THROW(model->forward(at::zeros({1, 4}, at::kLong), at::ones({1, 5}, at::kLong)), Error);
}

// The fp16 build keeps every wo in fp32 (transformers' _keep_in_fp32_modules), nothing else.
TEST(T5EncoderModel, Fp16KeepsWoInFp32) {
  const T5Config c = T5Config::from_file(model_fixture_dir("tiny-t5") + "/config.json");
  T5EncoderModelImpl model(c, at::TensorOptions().dtype(at::kHalf).device(at::kMeta));
  size_t wo = 0;
  for (const auto& p : model.named_parameters()) {
    const bool is_wo = p.key().find(".wo.") != std::string::npos;
    wo += is_wo;
    EXPECT_EQ(p.value().scalar_type(), is_wo ? at::kFloat : at::kHalf) << p.key();
  }
  EXPECT_EQ(wo, 2u);
  T5EncoderModelImpl bf16(c, at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta));
  for (const auto& p : bf16.named_parameters()) EXPECT_EQ(p.value().scalar_type(), at::kBFloat16) << p.key();
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// The decoder-LLM text encoder (Qwen-Image's Qwen2_5_VLForConditionalGeneration text path, Z-Image's
// Qwen3Model) against transformers, on the tiny models of tools/fixtures/make_llm_text_encoder_goldens.py:
// hidden_states[-1] (final norm) and hidden_states[-2] (layer L-1, un-normed) of a right-padded and a
// left-padded batch of 3 and of one unpadded prompt, in fp32 and bf16, loaded the way a pipeline loads
// them (meta build, key check, fill); then the config errors and the input checks.
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

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
using test::GoldenFile;
using test::model_fixture_dir;

// Against transformers 4.57.6 on torch 2.11.0, every case is bit-identical on this project's x86-64 CPUs,
// in fp32 and bf16 (the same ATen calls in the same order). The bounds leave room for another BLAS or
// thread count: fp32 within 1e-6 relative L2, bf16 within a few bf16 roundings (1e-2).
constexpr double kFp32Tolerance = 1e-6;
constexpr double kBf16Tolerance = 1e-2;

// The text_encoder component of a pipeline whose model_index.json names the golden's class.
Component text_encoder_component(const std::string& name) {
  const std::string dir = model_fixture_dir(name);
  const json cases = io::read_json_file(dir + ".golden/cases.json", "regenerate it");
  Component c;
  c.name = "text_encoder";
  c.role = ComponentRole::kTextEncoder;
  c.library = "transformers";
  c.class_name = cases.at("class").get<std::string>();
  c.path = dir;
  c.config = io::read_json_file(dir + "/config.json", "regenerate it");
  return c;
}

std::shared_ptr<DecoderLLMTextEncoderImpl> load(const std::string& name, at::ScalarType dtype) {
  auto model = load_component_as<DecoderLLMTextEncoderImpl>(text_encoder_component(name),
                                                              at::TensorOptions().dtype(dtype));
  if (!model) throw std::runtime_error("not a DecoderLLMTextEncoder: " + name);
  return model;
}

using test::expect_close;

class DecoderLLMGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderLLMGoldens, HiddenStatesMatchTransformers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  GoldenFile golden(model_fixture_dir(name) + ".golden/text_encoder.safetensors");
  for (const auto& [dtype, dname, tolerance] : {std::tuple{at::kFloat, "fp32", kFp32Tolerance},
                                                std::tuple{at::kBFloat16, "bf16", kBf16Tolerance}}) {
    auto model = load(name, dtype);
    for (const std::string c : {"right", "left", "alone"}) {
      const at::Tensor ids = golden[c + ".input_ids"], mask = golden[c + ".attention_mask"];
      const std::string prefix = c + "." + dname + ".hidden_states_";
      const std::string what = name + " " + c + " " + dname;
      const at::Tensor last = model->hidden_state(ids, mask, -1);
      EXPECT_EQ(last.scalar_type(), dtype);
      expect_close(last, golden[prefix + "last"], what + " [-1]", tolerance);
      expect_close(model->hidden_state(ids, mask, -2), golden[prefix + "penultimate"], what + " [-2]", tolerance);
      if (c == "alone") {
        // No mask is the all-ones mask: transformers drops it and so does dpinfer.
        EXPECT_TRUE(at::equal(model->hidden_state(ids, at::Tensor(), -1), last)) << what;
        EXPECT_TRUE(at::equal(model->hidden_state(ids, mask.to(at::kBool), -1), last)) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DecoderLLMGoldens,
                         ::testing::Values("tiny-qwen2.5-vl", "tiny-qwen2.5-vl-alt", "tiny-qwen3", "tiny-qwen3-alt"),
                         dpinfer::test::FixtureParamName());

TEST(DecoderLLMTextEncoder, ConfigsResolveAsTransformersReadsThem) {
  const DecoderLLMConfig vl =
      DecoderLLMConfig::qwen2_5_vl_from_file(model_fixture_dir("tiny-qwen2.5-vl") + "/config.json");
  EXPECT_EQ(vl.hidden_size, 32);  // from text_config, not the top level
  EXPECT_EQ(vl.num_key_value_heads, 2);
  EXPECT_EQ(vl.head_dim, 8);
  EXPECT_TRUE(vl.qkv_bias && !vl.o_bias && !vl.qk_norm && vl.positions_from_mask);
  EXPECT_EQ(vl.mrope_section, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(vl.prefix, "model");
  // The flat layout of older checkpoints: the text fields at the top level.
  const DecoderLLMConfig flat =
      DecoderLLMConfig::qwen2_5_vl_from_file(model_fixture_dir("tiny-qwen2.5-vl-alt") + "/config.json");
  EXPECT_EQ(flat.hidden_size, 48);
  EXPECT_EQ(flat.rope_theta, 1e4);
  EXPECT_EQ(flat.rms_norm_eps, 1e-5);
  const DecoderLLMConfig q3 = DecoderLLMConfig::qwen3_from_file(model_fixture_dir("tiny-qwen3") + "/config.json");
  EXPECT_EQ(q3.head_dim, 16);  // explicit, wider than hidden_size / heads = 8
  EXPECT_TRUE(q3.qk_norm && !q3.qkv_bias && !q3.positions_from_mask);
  EXPECT_EQ(q3.prefix, "");
  const DecoderLLMConfig q3alt =
      DecoderLLMConfig::qwen3_from_file(model_fixture_dir("tiny-qwen3-alt") + "/config.json");
  EXPECT_TRUE(q3alt.qkv_bias && q3alt.o_bias);
  // Qwen3Config's defaults: head_dim 128 whatever hidden_size / heads is.
  EXPECT_EQ(DecoderLLMConfig::qwen3_from_json(json::object()).head_dim, 128);
}

// Mistral3ForConditionalGeneration's text_config as transformers' MistralConfig and MistralAttention read it.
TEST(DecoderLLMTextEncoder, Mistral3ConfigsResolveAsTransformersReadsThem) {
  const DecoderLLMConfig dev = DecoderLLMConfig::mistral3_from_json(
      io::read_json_file(DPINFER_TEST_DATA_DIR "/pipelines/tiny-flux2-dev/text_encoder/config.json", "regenerate it"));
  EXPECT_EQ(dev.hidden_size, 16);
  EXPECT_EQ(dev.head_dim, 12);  // given: not hidden_size / heads = 8, as Mistral Small's 128 is not 5120 / 32
  EXPECT_EQ(dev.num_hidden_layers, 31);
  EXPECT_EQ(dev.rope_theta, 1e9);
  EXPECT_EQ(dev.sliding_window, 0);  // null
  EXPECT_TRUE(!dev.qkv_bias && !dev.o_bias && !dev.qk_norm && !dev.positions_from_mask);
  EXPECT_EQ(dev.prefix, "language_model.model");
  // MistralConfig's defaults: head_dim from hidden_size / heads when absent, null or 0; sliding_window 4096
  // when absent.
  const DecoderLLMConfig defaults = DecoderLLMConfig::mistral3_from_json(json{{"text_config", json::object()}});
  EXPECT_EQ(defaults.head_dim, 128);
  EXPECT_EQ(defaults.sliding_window, 4096);
  EXPECT_EQ(defaults.num_key_value_heads, 8);
  EXPECT_EQ(DecoderLLMConfig::mistral3_from_json(
                json{{"text_config", {{"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", nullptr}}}})
                .head_dim,
            16);
  for (const json& bad : {json::object(), json{{"text_config", {{"model_type", "llama"}}}},
                          json{{"text_config", {{"head_dim", -2}}}}, json{{"text_config", {{"sliding_window", 0}}}}}) {
    try {
      DecoderLLMConfig::mistral3_from_json(bad);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("text"), std::string::npos) << e.what();
    }
  }
}

// Past Mistral's sliding window the mask would differ from the causal one: refused, not computed wrong.
TEST(DecoderLLMTextEncoder, RefusesTextsLongerThanTheSlidingWindow) {
  c10::InferenceMode guard;
  json config = {{"text_config",
                  {{"hidden_size", 8}, {"intermediate_size", 8}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
                   {"num_key_value_heads", 1}, {"vocab_size", 16}, {"sliding_window", 4}}}};
  DecoderLLMTextEncoder model(DecoderLLMConfig::mistral3_from_json(config), at::TensorOptions().dtype(at::kFloat));
  for (auto& p : model->parameters()) p.normal_(0, 0.1);
  EXPECT_NO_THROW(model->hidden_state(at::ones({1, 4}, at::kLong), at::Tensor(), 1));
  try {
    model->hidden_state(at::ones({1, 5}, at::kLong), at::Tensor(), 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_window of 4"), std::string::npos) << e.what();
  }
}

TEST(DecoderLLMTextEncoder, PenultimateStateSkipsTheLastLayer) {
  c10::InferenceMode guard;
  auto model = load("tiny-qwen3", at::kFloat);
  GoldenFile golden(model_fixture_dir("tiny-qwen3") + ".golden/text_encoder.safetensors");
  const at::Tensor ids = golden["right.input_ids"], mask = golden["right.attention_mask"];
  const at::Tensor before = model->hidden_state(ids, mask, -2);
  // Poison the last layer: hidden_states[-2] must not run it, hidden_states[-1] must.
  const int64_t last = model->config().num_hidden_layers - 1;
  for (auto& p : model->named_parameters())
    if (p.key().rfind("layers." + std::to_string(last) + ".", 0) == 0)
      p.value().fill_(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(at::equal(model->hidden_state(ids, mask, -2), before));
  EXPECT_TRUE(model->hidden_state(ids, mask, -1).isnan().any().item<bool>());
  // hidden_states[0] is the embeddings.
  EXPECT_TRUE(at::equal(model->hidden_state(ids, mask, 0), model->hidden_state(ids, mask, -(last + 2))));
}

TEST(DecoderLLMTextEncoder, ParameterNamesAreTheCheckpointKeys) {
  const std::string vl_config = model_fixture_dir("tiny-qwen2.5-vl") + "/config.json";
  DecoderLLMTextEncoder vl(DecoderLLMConfig::qwen2_5_vl_from_file(vl_config), at::TensorOptions().device(at::kMeta));
  const auto vp = vl->named_parameters();
  EXPECT_TRUE(vp.contains("model.embed_tokens.weight"));
  EXPECT_TRUE(vp.contains("model.layers.2.self_attn.q_proj.bias"));
  EXPECT_FALSE(vp.contains("model.layers.2.self_attn.o_proj.bias"));
  EXPECT_FALSE(vp.contains("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_TRUE(vp.contains("model.norm.weight"));
  DecoderLLMTextEncoder q3(DecoderLLMConfig::qwen3_from_file(model_fixture_dir("tiny-qwen3") + "/config.json"),
                           at::TensorOptions().device(at::kMeta));
  const auto qp = q3->named_parameters();
  EXPECT_TRUE(qp.contains("layers.0.self_attn.k_norm.weight"));
  EXPECT_EQ(qp["layers.0.self_attn.q_proj.weight"].sizes(), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(qp["layers.0.self_attn.k_proj.weight"].sizes(), (std::vector<int64_t>{32, 32}));
  EXPECT_FALSE(qp.contains("layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(qp.contains("norm.weight"));
  EXPECT_EQ(vp.size(), 2 + 3 * 12u);  // embed, norm; per layer q/k/v weight+bias, o, 3 MLP, 2 norms
  EXPECT_EQ(qp.size(), 2 + 3 * 11u);  // per layer q/k/v/o, q_norm, k_norm, 3 MLP, 2 norms
}

TEST(DecoderLLMTextEncoder, RejectsBadInputs) {
  c10::InferenceMode guard;
  auto model = load("tiny-qwen3-alt", at::kFloat);
  const at::Tensor ids = at::zeros({2, 5}, at::kLong);
  EXPECT_THROW(model->hidden_state(at::zeros({2, 5}, at::kFloat), {}), Error);
  EXPECT_THROW(model->hidden_state(at::zeros({5}, at::kLong), {}), Error);
  EXPECT_THROW(model->hidden_state(at::zeros({2, 0}, at::kLong), {}), Error);
  EXPECT_THROW(model->hidden_state(ids, at::ones({2, 4}, at::kLong)), Error);
  EXPECT_THROW(model->hidden_state(ids, at::ones({2, 5}, at::kFloat)), Error);
  try {
    model->hidden_state(ids, {}, -4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "text encoder: hidden state -4 is out of range; expected -3 to 2 (num_hidden_layers + 1 states)");
  }
  try {
    model->hidden_state(at::full({1, 3}, 500, at::kLong), {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "text encoder: token id 500 is outside the vocabulary of 500; the tokenizer does not belong to this "
                 "text encoder");
  }
}

std::string qwen3_error(const json& j) {
  try {
    DecoderLLMConfig::qwen3_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string qwen2_5_vl_error(const json& j) {
  try {
    DecoderLLMConfig::qwen2_5_vl_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DecoderLLMTextEncoder, ConfigErrorsNameTheField) {
  EXPECT_EQ(qwen3_error({{"hidden_act", "gelu"}}),
            "text encoder config: hidden_act 'gelu' is not supported; supported: silu");
  EXPECT_EQ(qwen3_error({{"num_attention_heads", 6}, {"num_key_value_heads", 4}}),
            "text encoder config: num_attention_heads = 6 must be divisible by num_key_value_heads = 4");
  EXPECT_EQ(qwen3_error({{"use_sliding_window", true}}),
            "text encoder config: use_sliding_window true is not supported; supported: false");
  EXPECT_EQ(qwen3_error({{"head_dim", 7}}),
            "text encoder config: head_dim = 7 must be even (rotary embeddings rotate pairs)");
  EXPECT_EQ(qwen3_error({{"head_dim", nullptr}}), "text encoder config: head_dim must be a positive integer, got null");
  EXPECT_EQ(qwen3_error({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}}}),
            "text encoder config: rope_scaling.rope_type 'yarn' is not supported; supported: default, mrope");
  EXPECT_EQ(qwen3_error({{"layer_types", {"full_attention", "sliding_attention"}}}),
            "text encoder config: layer_types[1] 'sliding_attention' is not supported; supported: full_attention");
  EXPECT_EQ(qwen3_error({{"num_hidden_layers", "2"}}),
            "text encoder config: num_hidden_layers must be an integer, got '2'");
  EXPECT_EQ(qwen3_error({{"rope_theta", -1}}), "text encoder config: rope_theta must be a positive number, got -1.0");

  const json text = {{"hidden_size", 32}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                     {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {1, 1, 2}}}}};
  EXPECT_EQ(qwen2_5_vl_error({{"text_config", text}}), "");
  json bad = text;
  bad["rope_scaling"]["mrope_section"] = {1, 1, 1};
  EXPECT_EQ(qwen2_5_vl_error({{"text_config", bad}}),
            "text encoder config text_config: rope_scaling.mrope_section must be 3 sections summing to head_dim / "
            "2 = 4, got [1,1,1]");
  bad = text;
  bad.erase("rope_scaling");
  EXPECT_EQ(qwen2_5_vl_error(bad),
            "text encoder config: rope_scaling is missing; Qwen2.5-VL needs its mrope_section");
  bad = text;
  bad["hidden_size"] = 30;
  EXPECT_EQ(qwen2_5_vl_error(bad),
            "text encoder config: hidden_size = 30 must be divisible by num_attention_heads = 4");
  bad = text;
  bad["head_dim"] = 16;
  EXPECT_EQ(qwen2_5_vl_error(bad),
            "text encoder config: head_dim = 16 differs from hidden_size / num_attention_heads = 8");
  EXPECT_EQ(qwen2_5_vl_error({{"text_config", 3}}),
            "text encoder config text_config: expected a json object, got 3");

  // From a file: the message names it, on one line.
  try {
    DecoderLLMConfig::qwen3_from_file(model_fixture_dir("tiny-qwen2.5-vl") + "/missing.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing.json"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(DecoderLLMTextEncoder, ModelClassRowsBuildOnTheMetaDevice) {
  for (const char* cls : {"Qwen2_5_VLForConditionalGeneration", "Qwen3Model"}) {
    const ModelClass* m = find_model_class(cls);
    ASSERT_NE(m, nullptr) << cls;
    EXPECT_EQ(m->role, ComponentRole::kTextEncoder);
  }
  const Component vl = text_encoder_component("tiny-qwen2.5-vl");
  const ModelClass* row = find_model_class(vl.class_name);
  auto meta = row->build(vl.config, at::TensorOptions().device(at::kMeta));
  EXPECT_EQ(meta->named_parameters().size(), 38u);
  const nlohmann::ordered_json facts = row->facts(vl.config);
  EXPECT_EQ(facts.at("num_key_value_heads").get<int64_t>(), 2);
  EXPECT_EQ(facts.at("mrope_section").dump(), "[1,1,2]");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

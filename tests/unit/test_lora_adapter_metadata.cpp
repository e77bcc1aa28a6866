// The PEFT adapter config of a LoRA file's header (pipeline/loading/lora_adapter_metadata.h): peft
// 0.17's pattern matching, each layer's alpha and rank, and each refusal in one line. The merged
// weights against diffusers are in tests/torch/test_lora.cpp (tests/data/loras-scaling).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/loading/lora_adapter_metadata.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using pipeline::lora_pattern_matches;
using pipeline::LoraAdapterMetadata;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string refusal(const nlohmann::json& metadata, const std::string& component = "transformer",
                    const std::string& module = "transformer_blocks.0.attn.to_q") {
  try {
    LoraAdapterMetadata::parse(metadata.dump(), "m.safetensors").scale_of(component, module);
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find("m.safetensors"), std::string::npos) << what;
    return what;
  }
  return "(accepted)";
}


// Each expectation is what Python's re.match(rf"(.*\.)?({key})$", module) gives (peft's
// get_pattern_key), checked with CPython 3.11.
TEST(LoraAdapterMetadata, PatternKeysMatchAsPeftsRegularExpression) {
  struct Case {
    const char* key;
    const char* module;
    bool matches;
  };
  const Case cases[] = {{"to_q", "transformer_blocks.0.attn.to_q", true},
                        {"to_q", "to_q", true},
                        {"to_q", "attn.add_to_q", false},
                        {"attn.to_q", "transformer_blocks.0.attn.to_q", true},
                        {"^proj_out", "proj_out", true},
                        {"^proj_out", "single_transformer_blocks.0.proj_out", false},
                        {"proj_out", "single_transformer_blocks.0.proj_out", true},
                        {"proj_out", "proj_outer", false},
                        {"blocks.0.attn", "transformer_blocks.0.attn", false},
                        {"blocks.0.attn", "transformer_blocks.0.attn.to_q", false},
                        {"^transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_q", true},
                        {"s.0.attn.to_q", "transformer_blocks.0.attn.to_q", false},
                        {".to_q", "attn.to_q", false},
                        {"..to_q", "attn.to_q", false},
                        {"attn.to_q", "attn.to_q", true}};
  for (const Case& c : cases) EXPECT_EQ(lora_pattern_matches(c.key, c.module), c.matches) << c.key << " ~ " << c.module;
  // '.' is any character, as in the regular expression.
  EXPECT_TRUE(lora_pattern_matches("attn.to_q", "attnXto_q"));
}

TEST(LoraAdapterMetadata, EachLayerTakesTheFirstPatternThatMatchesInTheFilesOrder) {
  // json.dumps(sort_keys=True) orders the top level; a pattern object keeps its own order.
  const std::string text = R"({"transformer.alpha_pattern": {"to_k": 3.0, "attn.to_k": 5, "^proj_out": 7},
    "transformer.lora_alpha": 8, "transformer.r": 4, "transformer.rank_pattern": {"proj_out": 2},
    "text_encoder.lora_alpha": 1.5, "text_encoder.r": 2})";
  const auto m = LoraAdapterMetadata::parse(text, "m.safetensors");
  EXPECT_TRUE(m.configures("transformer"));
  EXPECT_TRUE(m.configures("text_encoder"));
  EXPECT_FALSE(m.configures("text_encoder_2"));
  const auto q = m.scale_of("transformer", "transformer_blocks.0.attn.to_q");
  EXPECT_EQ(q.alpha, 8.0);
  EXPECT_EQ(q.rank, 4);
  EXPECT_EQ(m.scale_of("transformer", "transformer_blocks.0.attn.to_k").alpha, 3.0);  // "to_k" comes first
  const auto out = m.scale_of("transformer", "proj_out");
  EXPECT_EQ(out.alpha, 7.0);
  EXPECT_EQ(out.rank, 2);
  const auto single = m.scale_of("transformer", "single_transformer_blocks.1.proj_out");
  EXPECT_EQ(single.alpha, 8.0);  // "^proj_out" is the top-level module only
  EXPECT_EQ(single.rank, 2);     // "proj_out" is any module of that name
  EXPECT_EQ(m.scale_of("text_encoder", "text_model.encoder.layers.0.self_attn.q_proj").alpha, 1.5);
}

TEST(LoraAdapterMetadata, TargetModulesListTheLayersDiffusersBuilds) {
  const nlohmann::json m = {{"transformer.r", 4},
                            {"transformer.lora_alpha", 4},
                            {"transformer.target_modules", {"to_k", "transformer_blocks.0.attn.to_q"}}};
  EXPECT_EQ(refusal(m), "(accepted)");
  EXPECT_EQ(refusal(m, "transformer", "single_transformer_blocks.3.attn.to_k"), "(accepted)");
  const std::string why = refusal(m, "transformer", "transformer_blocks.0.attn.to_v");
  EXPECT_NE(why.find("'transformer.transformer_blocks.0.attn.to_v' is not among"), std::string::npos) << why;
  // A regular expression (a string) is not checked: every layer of the file is built.
  EXPECT_EQ(refusal({{"transformer.r", 4}, {"transformer.lora_alpha", 4}, {"transformer.target_modules", ".*to_q"}}),
            "(accepted)");
}

TEST(LoraAdapterMetadata, WhatDpinferCannotMergeAsDiffusersDoesIsRefusedInOneLine) {
  const nlohmann::json base = {{"transformer.r", 4}, {"transformer.lora_alpha", 4}};
  const auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json m = base;
    m[key] = value;
    return refusal(m);
  };
  EXPECT_NE(with("transformer.use_rslora", true).find("'transformer.use_rslora' is true"), std::string::npos);
  // DoRA is merged (lora.cpp checks the flag against the file's lora_magnitude_vector tensors).
  EXPECT_EQ(with("transformer.use_dora", true), "(accepted)");
  EXPECT_NE(with("transformer.use_dora", "yes").find("'transformer.use_dora' is not true or false"), std::string::npos);
  EXPECT_NE(with("transformer.lora_bias", true).find("'transformer.lora_bias' is true"), std::string::npos);
  EXPECT_EQ(with("transformer.use_rslora", false), "(accepted)");
  EXPECT_NE(with("transformer.layers_to_transform", {0, 1}).find("'transformer.layers_to_transform' limits"),
            std::string::npos);
  EXPECT_EQ(with("transformer.layers_to_transform", nullptr), "(accepted)");
  EXPECT_NE(with("transformer.rank_pattern", {{"to_(q|k)", 2}})
                .find("'transformer.rank_pattern' key 'to_(q|k)' is a regular expression"),
            std::string::npos);
  EXPECT_NE(with("transformer.rank_pattern", {{"to_q", 2.5}})
                .find("'transformer.rank_pattern.to_q' is '2.5', not a positive"),
            std::string::npos);
  EXPECT_NE(with("transformer.lora_alpha", "8").find("'transformer.lora_alpha' is '\"8\"', not a finite number"),
            std::string::npos);
  EXPECT_NE(refusal({{"transformer.r", 4}}).find("'transformer.lora_alpha' is missing"), std::string::npos);
  EXPECT_NE(refusal(base, "text_encoder", "text_model.encoder.layers.0.mlp.fc1").find("configures no text_encoder"),
            std::string::npos);
  try {
    LoraAdapterMetadata::parse("[1, 2]", "m.safetensors");
    FAIL() << "a JSON array was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a JSON object"), std::string::npos) << e.what();
  }
}

// get_peft_kwargs on a component's layers in diffusers' order (the goldens against diffusers are
// LoraScalingParity's, tests/torch/test_lora.cpp).
TEST(LoraAdapterMetadata, WithoutMetadataDiffusersInfersTheConfigFromTheLayers) {
  using pipeline::infer_lora_adapter_config;
  using pipeline::lora_layer_scale;
  // No alphas: lora_alpha is the first layer's rank; r the most common (the first seen of those tied).
  auto c = infer_lora_adapter_config({{"proj_out", 2, {}}, {"a.to_q", 4, {}}, {"a.to_k", 4, {}}}, true);
  EXPECT_EQ(c.r, 4);
  EXPECT_EQ(c.lora_alpha, 2.0);
  EXPECT_EQ(lora_layer_scale(c, "a.to_q").alpha, 2.0);
  EXPECT_EQ(lora_layer_scale(c, "proj_out").rank, 2);
  EXPECT_EQ(lora_layer_scale(c, "b.proj_out").rank, 4);  // "^proj_out" is anchored
  c = infer_lora_adapter_config({{"x", 3, {}}, {"y", 2, {}}}, false);
  EXPECT_EQ(c.r, 3);
  // Alphas on some layers: the others take the most common; a pattern key is unanchored.
  const std::vector<pipeline::LoraLayerFacts> some = {
      {"context_embedder", 4, 3.0}, {"proj_out", 4, 1.0}, {"b.proj_out", 4, {}}, {"a.to_k", 4, {}}, {"a.to_q", 4, 3.0}};
  c = infer_lora_adapter_config(some, true);
  EXPECT_EQ(c.lora_alpha, 3.0);
  EXPECT_EQ(lora_layer_scale(c, "a.to_k").alpha, 3.0);
  EXPECT_EQ(lora_layer_scale(c, "b.proj_out").alpha, 1.0);  // proj_out's pattern reaches it
  // Floats (a kohya file): the most common alpha, not the first.
  c = infer_lora_adapter_config({{"a", 4, 1.0}, {"b", 4, 8.0}, {"c", 4, 8.0}, {"d", 4, {}}}, false);
  EXPECT_EQ(c.lora_alpha, 8.0);
  EXPECT_EQ(lora_layer_scale(c, "d").alpha, 8.0);
  EXPECT_EQ(lora_layer_scale(c, "a").alpha, 1.0);
  // Tensors hash by identity: the first alpha is "most common".
  c = infer_lora_adapter_config({{"a", 4, 1.0}, {"b", 4, 8.0}, {"c", 4, 8.0}, {"d", 4, {}}}, true);
  EXPECT_EQ(lora_layer_scale(c, "d").alpha, 1.0);
  EXPECT_EQ(lora_layer_scale(c, "b").alpha, 8.0);
  // Network alphas in their own order (a kohya file's keys: fc1 before k_proj), one filed under a name
  // that reaches no module: the 1-1 tie goes to the first seen, and k_proj takes it too.
  c = infer_lora_adapter_config({{"l.k_proj", 4, {}}, {"l.q_proj", 4, {}}, {"l.fc1", 4, {}}},
                                {{"l.fc1", 2.0}, {std::nullopt, 1.0}}, false);
  EXPECT_EQ(c.lora_alpha, 2.0);
  EXPECT_TRUE(c.alpha_pattern.empty());
  EXPECT_EQ(lora_layer_scale(c, "l.k_proj").alpha, 2.0);
  // A repeated alpha_pattern key keeps its place and takes the last value (a Python dict).
  c = infer_lora_adapter_config({{"a", 4, {}}, {"b", 4, {}}}, {{"a", 1.0}, {"b", 1.0}, {"b", 3.0}, {"b", 5.0}}, false);
  EXPECT_EQ(c.lora_alpha, 1.0);
  ASSERT_EQ(c.alpha_pattern.size(), 1u);
  EXPECT_EQ(c.alpha_pattern[0].second, 5.0);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

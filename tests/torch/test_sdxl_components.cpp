// SDXL's components against transformers and diffusers, on the two tiny SDXL pipelines
// (tools/fixtures/make_sdxl_pipelines.py): both CLIP text encoders (the penultimate hidden
// states without the final norm, clip_skip, the pooled projection of text_encoder_2), and
// the UNet with its text_time added conditioning (pooled embedding and micro-conditioning
// ids, including ids other than the image's own size), loaded the way the pipeline loads
// them: built on the meta device, checked against the files, then filled.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;
using test::pipeline_dir;

class SdxlComponents : public ::testing::TestWithParam<std::string> {
 protected:
  template <typename Impl>
  std::shared_ptr<Impl> load(const std::string& component) {
    const ModelDir model = resolve_model(pipeline_dir(GetParam()));
    return load_component_as<Impl>(model.at(component), at::TensorOptions().dtype(at::kFloat));
  }
};

TEST_P(SdxlComponents, TextEncodersMatchTransformers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  GoldenFile golden(name, "text_encoder.safetensors");
  auto te1 = load<CLIPTextModelImpl>("text_encoder");
  auto te2 = load<CLIPTextModelWithProjectionImpl>("text_encoder_2");
  ASSERT_TRUE(te1 && te2);
  const at::Tensor ids1 = golden["text.input_ids"], ids2 = golden["text_2.input_ids"];

  // text_encoder: hidden_states[-2] and [-3] without final_layer_norm, and the usual outputs.
  expect_close(te1->penultimate_hidden_state(ids1, 0), golden["text.hidden_states_penultimate"],
               name + " text penultimate");
  expect_close(te1->penultimate_hidden_state(ids1, 1), golden["text.hidden_states_skip1"], name + " text skip 1");
  const CLIPTextModelOutput out1 = te1->forward(ids1);
  expect_close(out1.last_hidden_state, golden["text.last_hidden_state"], name + " text last_hidden_state");
  expect_close(out1.pooler_output, golden["text.pooler_output"], name + " text pooler_output");

  // text_encoder_2: the same, and the projection SDXL pools with.
  const auto e2 = te2->encode_for_sdxl(ids2, 0);
  expect_close(e2.hidden, golden["text_2.hidden_states_penultimate"], name + " text_2 penultimate");
  expect_close(e2.text_embeds, golden["text_2.text_embeds"], name + " text_2 text_embeds");
  expect_close(te2->encode_for_sdxl(ids2, 1).hidden, golden["text_2.hidden_states_skip1"], name + " text_2 skip 1");
  expect_close(te2->forward(ids2).pooler_output, golden["text_2.pooler_output"], name + " text_2 pooler_output");
  expect_close(te2->text_embeds(ids2), golden["text_2.text_embeds"], name + " text_2 text_embeds()");

  // encode_prompt: both encoders side by side; clip_skip moves both, never the pooled embedding.
  expect_close(at::cat({te1->penultimate_hidden_state(ids1, 0), e2.hidden}, -1), golden["encode.prompt_embeds"],
               name + " encode_prompt");
  expect_close(at::cat({te1->penultimate_hidden_state(ids1, 1), te2->encode_for_sdxl(ids2, 1).hidden}, -1),
               golden["encode.prompt_embeds_clip_skip1"], name + " encode_prompt clip_skip 1");
  expect_close(e2.text_embeds, golden["encode.pooled_prompt_embeds"], name + " pooled_prompt_embeds");
}

TEST_P(SdxlComponents, UnetWithAddedConditioningMatchesDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  GoldenFile golden(name, "unet.safetensors");
  auto unet = load<UNet2DConditionModelImpl>("unet");
  ASSERT_TRUE(unet);
  EXPECT_EQ(unet->config().addition_embed_type, UNetConfig::AdditionEmbedType::kTextTime);
  const AddedConditioning added{golden["unet.text_embeds"], golden["unet.time_ids"]};
  const at::Tensor context = golden["unet.encoder_hidden_states"];
  const json cases = test::golden_cases(name).at("unet").at("cases");
  ASSERT_FALSE(cases.empty());
  for (const json& c : cases) {
    const at::Tensor t = c.at("timestep_dtype") == "int64"
                             ? at::scalar_tensor(c.at("timestep").get<int64_t>(), at::kLong)
                             : at::scalar_tensor(c.at("timestep").get<double>(), at::kFloat);
    const at::Tensor sample = golden[c.at("sample").get<std::string>()];
    expect_close(unet->forward(sample, t, context, {}, &added), golden[c.at("output").get<std::string>()],
                 name + " " + c.at("output").get<std::string>() + " " + c10::str(sample.sizes()));
  }
  // Without the added conditioning an SDXL UNet cannot run: a clear error, not a crash.
  try {
    unet->forward(golden["unet.sample"], at::scalar_tensor(1, at::kLong), context);
    FAIL() << "expected an error";
  } catch (const dpinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs text_embeds and time_ids"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SdxlComponents, ::testing::Values("tiny-sdxl", "tiny-sdxl-alt"),
                         dpinfer::test::FixtureParamName());

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

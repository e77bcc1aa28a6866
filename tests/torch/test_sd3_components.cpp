// SD3's text side against transformers and diffusers, on the three tiny SD3 pipelines
// (tools/fixtures/make_sd3_pipelines.py, clip.safetensors): both CLIPTextModelWithProjection
// encoders as StableDiffusion3Pipeline._get_clip_prompt_embeds uses them (the token ids of both
// CLIP tokenizers, hidden_states[-2] and [-3] without the final norm, the projected pooled
// output), loaded the way the pipeline loads them; with T5 (tiny-sd3.5-t5), T5 as
// _get_t5_prompt_embeds uses it (tokenizer_3's ids at max_sequence_length 16 and 256, the
// encoder's last_hidden_state without a mask); and the layout of encode_prompt's result that the
// family reproduces (both CLIPs side by side, zero-padded or, when wider, cut to T5's width
// joint_attention_dim, then max_sequence_length rows of T5's states, or zeros without T5),
// checked on diffusers' own output.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/models/transformers/sd3_transformer_config.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "support/param_names.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;

class SD3Components : public ::testing::TestWithParam<std::string> {};

TEST_P(SD3Components, ClipEncodersAndPromptLayoutMatchDiffusers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  const ModelDir model = resolve_model(test::pipeline_dir(name));
  const json doc = test::golden_cases(name);
  const GoldenFile golden(name, "clip.safetensors");
  const auto texts = doc.at("clip").at("texts").get<std::vector<std::string>>();
  std::shared_ptr<CLIPTextModelWithProjectionImpl> encoders[2];
  std::unique_ptr<Tokenizer> tokenizers[2];
  const char* te_names[2] = {"text_encoder", "text_encoder_2"};
  const char* tok_names[2] = {"tokenizer", "tokenizer_2"};
  for (int k = 0; k < 2; ++k) {
    encoders[k] = load_component_as<CLIPTextModelWithProjectionImpl>(model.at(te_names[k]),
                                                                     at::TensorOptions().dtype(at::kFloat));
    const Component& tok = model.at(tok_names[k]);
    tokenizers[k] = find_tokenizer_class(tok.class_name)->load(tok.path);
  }
  const int max_length = tokenizers[0]->model_max_length();
  for (const json& c : doc.at("clip").at("clip")) {
    const int k = c.at("encoder").get<int>();
    const std::string key = c.at("key").get<std::string>();
    const std::string what = name + " " + key;
    const at::Tensor ids = golden[key + ".ids"];
    const Encoding e = tokenizers[k]->encode(texts.at(c.at("text").get<size_t>()), max_length);
    EXPECT_TRUE(at::equal(at::tensor(e.ids, at::kLong).view({1, -1}), ids)) << what << " token ids";
    for (int skip = 0; skip < 2; ++skip) {
      const auto enc = encoders[k]->encode_for_sdxl(ids, skip);
      expect_close(enc.hidden, golden[key + ".hidden_skip" + std::to_string(skip)],
                   what + " hidden_states[-" + std::to_string(skip + 2) + "]");
      if (skip == 0) expect_close(enc.text_embeds, golden[key + ".pooled"], what + " text_embeds");
    }
  }
  // T5, when the model has it: loaded as the pipeline loads it, in fp32.
  const bool has_t5 = model.find("text_encoder_3") != nullptr;
  EXPECT_EQ(has_t5, name == "tiny-sd3.5-t5");
  std::shared_ptr<T5EncoderModelImpl> t5;
  std::unique_ptr<Tokenizer> t5_tokenizer;
  if (has_t5) {
    t5 = load_component_as<T5EncoderModelImpl>(model.at("text_encoder_3"), at::TensorOptions().dtype(at::kFloat));
    const Component& tok = model.at("tokenizer_3");
    t5_tokenizer = find_tokenizer_class(tok.class_name)->load(tok.path);
  }
  // encode_prompt: [cat(L, G) padded or cut to joint_attention_dim; T5's states or zeros], pooled cat(L, G).
  const int64_t joint = SD3TransformerConfig::from_json(model.at("transformer").config).joint_attention_dim;
  for (const json& c : doc.at("clip").at("encode_prompt")) {
    const std::string key = c.at("key").get<std::string>();
    const std::string text_key = "text" + std::to_string(c.at("text").get<int>());
    const int64_t max_seq = c.at("max_sequence_length").get<int64_t>();
    at::Tensor clip =
        at::cat({golden["clip0." + text_key + ".hidden_skip0"], golden["clip1." + text_key + ".hidden_skip0"]}, -1);
    clip = clip.size(-1) <= joint ? at::constant_pad_nd(clip, {0, joint - clip.size(-1)}, 0)
                                  : clip.narrow(-1, 0, joint);
    at::Tensor t5_states = at::zeros({1, max_seq, joint});
    if (has_t5) {
      const at::Tensor ids = golden[key + ".t5_ids"];
      const Encoding e = t5_tokenizer->encode(texts.at(c.at("text").get<size_t>()), static_cast<int>(max_seq));
      EXPECT_TRUE(at::equal(at::tensor(e.ids, at::kLong).view({1, -1}), ids)) << name << " " << key << " T5 ids";
      expect_close(t5->forward(ids), golden[key + ".t5_hidden"], name + " " + key + " T5 last_hidden_state");
      t5_states = golden[key + ".t5_hidden"];
    }
    const at::Tensor expected = at::cat({clip, t5_states}, 1);
    const at::Tensor got = golden[key + ".prompt_embeds"];
    ASSERT_EQ(got.sizes(), expected.sizes()) << key;
    EXPECT_TRUE(at::equal(got, expected)) << name << " " << key;
    const at::Tensor pooled =
        at::cat({golden["clip0." + text_key + ".pooled"], golden["clip1." + text_key + ".pooled"]}, -1);
    EXPECT_TRUE(at::equal(golden[key + ".pooled"], pooled)) << name << " " << key << " pooled";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SD3Components, ::testing::Values("tiny-sd3", "tiny-sd3.5", "tiny-sd3.5-t5"),
                         dpinfer::test::FixtureParamName());

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// The FLUX.2 [klein] family beyond its image goldens (test_pipeline_parity.cpp): its row, the chat template
// string, what a loaded tiny pipeline reports, the negative prompt and size refusals, cancellation between
// steps, and the refusal of components that do not belong together before any weights load, by load and by
// inspect alike.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/families/flux2.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kPipelines = DPINFER_TEST_DATA_DIR "/pipelines";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

ImageRequest item(int width, int height) {
  ImageRequest r;
  r.prompt = "a red cube";
  r.steps = 1;
  r.guidance_scale = 4.0;
  r.width = width;
  r.height = height;
  return r;
}

TEST(Flux2Family, RowHasDiffusersDefaultsAndSettings) {
  const Family* f = find_family("Flux2KleinPipeline");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "flux2");
  EXPECT_EQ(f->default_steps, 50);            // Flux2KleinPipeline.__call__'s num_inference_steps
  EXPECT_EQ(f->default_guidance_scale, 4.0);  // and guidance_scale
  EXPECT_EQ(f->size_multiple, 16);            // vae_scale_factor * 2 of the real VAE
  EXPECT_EQ(f->prediction, Prediction::kFlowVelocity);
  std::vector<std::string> components;
  for (const ComponentSpec& c : f->components) components.push_back(c.name);
  EXPECT_EQ(components, (std::vector<std::string>{"transformer", "text_encoder", "tokenizer", "vae", "scheduler"}));
  ASSERT_EQ(f->settings.size(), 2u);
  EXPECT_EQ(f->settings[0].name, "max_sequence_length");
  EXPECT_EQ(f->settings[0].default_value, 512);
  EXPECT_EQ(f->settings[1].name, "text_encoder_out_layers");  // Flux2KleinPipeline.__call__'s (9, 18, 27)
  EXPECT_EQ(f->settings[1].default_value, nlohmann::json({9, 18, 27}));
  const Family* dev = find_family("Flux2Pipeline");
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->settings.at(1).default_value, nlohmann::json({10, 20, 30}));  // Flux2Pipeline.__call__'s
}

// The string apply_chat_template(enable_thinking=False) rendered for the golden cases (make_flux2_pipelines.py).
TEST(Flux2Family, ChatPromptIsQwen3TemplateWithoutThinking) {
  const json doc = read_json(kPipelines + "/tiny-flux2-klein.golden/cases.json");
  EXPECT_EQ(flux2_klein_chat_prompt("a photograph of an astronaut riding a horse"),
            doc["chat_template_example"].get<std::string>());
}

// The text path: Qwen3ForCausalLM loads as the decoder-LLM module under model.* (lm_head, tied, absent from the
// file), and hidden_states({9, 18, 27}) from one forward equals each hidden_state() alone, padding rows too.
TEST(Flux2Family, TextEncoderGivesTheStackedStatesFromOneForward) {
  c10::InferenceMode guard;
  const ModelDir md = resolve_model(kPipelines + "/tiny-flux2-klein");
  auto te = load_component_as<DecoderLLMTextEncoderImpl>(md.at("text_encoder"), at::TensorOptions().dtype(at::kFloat));
  ASSERT_TRUE(te);
  const at::Tensor ids = at::tensor(std::vector<int64_t>{151644, 872, 198, 151645, 151643, 151643}).view({1, -1});
  const at::Tensor mask = at::tensor(std::vector<int64_t>{1, 1, 1, 1, 0, 0}).view({1, -1});
  const std::vector<at::Tensor> states = te->hidden_states(ids, mask, {9, 18, 27});
  ASSERT_EQ(states.size(), 3u);
  for (size_t k = 0; k < states.size(); ++k)
    EXPECT_TRUE(at::equal(states[k], te->hidden_state(ids, mask, std::vector<int64_t>{9, 18, 27}[k]))) << k;
  EXPECT_FALSE(at::equal(states[0], states[2]));
  EXPECT_THROW(te->hidden_states(ids, mask, {29}), Error);  // 28 layers: states 0 to 28
}

TEST(Flux2Family, LoadedPipelineReportsItsFamilyAndSizes) {
  LoadRequest r;
  r.model = kPipelines + "/tiny-flux2-klein-base";
  r.settings = {{"max_sequence_length", 64}};
  auto pipe = load_text_to_image(r);
  const PipelineInfo& info = pipe->info();
  EXPECT_EQ(info.family, "flux2");
  EXPECT_EQ(info.pipeline_class, "Flux2KleinPipeline");
  EXPECT_EQ(info.scheduler_name, "flow_match_euler");
  EXPECT_EQ(info.default_width, 512);  // 128 x the tiny VAE's scale factor 4
  EXPECT_EQ(info.size_multiple, 8);
  EXPECT_EQ(info.settings, (json{{"max_sequence_length", 64}, {"text_encoder_out_layers", {9, 18, 27}}}));
  EXPECT_THROW(pipe->generate({item(36, 32)}), InputError);  // not a multiple of 8
  ImageRequest negative = item(32, 32);
  negative.negative_prompt = "blurry";
  try {
    pipe->generate({negative});
    ADD_FAILURE() << "a negative prompt was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("takes no negative prompt"), std::string::npos) << e.what();
  }
}

TEST(Flux2Family, CancelledBetweenSteps) {
  LoadRequest r;
  r.model = kPipelines + "/tiny-flux2-klein";
  auto pipe = load_text_to_image(r);
  int asked = 0;
  pipe->set_cancel_check([&asked] { return ++asked == 3; });
  ImageRequest one = item(16, 16);
  one.steps = 5;
  EXPECT_THROW(pipe->generate({one}), Cancelled);
  EXPECT_EQ(asked, 3);
}

/// What loading a copy of tiny-flux2-klein whose weight files are garbage, with `edit` applied to one config,
/// fails with, and what `dpinfer inspect` reports. A refusal must name the mismatch, not a weight file.
struct Refusal {
  std::string load, inspect;
};

Refusal refusal(const std::string& file, const std::function<void(json&)>& edit) {
  test::TempDir dir;
  const std::string root = dir.file("m");
  fs::copy(kPipelines + "/tiny-flux2-klein", root, fs::copy_options::recursive);
  for (const char* f : {"transformer/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors",
                        "vae/diffusion_pytorch_model.safetensors"})
    test::write_file(root + "/" + f, "not safetensors");
  if (!file.empty()) {
    json j = read_json(root + "/" + file);
    edit(j);
    test::write_file(root + "/" + file, j.dump(2));
  }
  Refusal out{"(loaded)", inspect_model(root).error};
  LoadRequest r;
  r.model = root;
  try {
    load_text_to_image(r);
  } catch (const InputError& e) {
    out.load = e.what();
  }
  return out;
}

TEST(Flux2Family, ComponentsThatDoNotBelongTogetherAreRefusedBeforeWeightsLoad) {
  struct Case {
    std::string file;
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases{
      {"transformer/config.json", [](json& j) { j["joint_attention_dim"] = 16; },
       "transformer config: joint_attention_dim 16 is not 3 times the text encoder's hidden_size 16"},
      {"vae/config.json", [](json& j) { j["latent_channels"] = 8; },
       "transformer config: in_channels 16 and patch_size^2 * out_channels 16 must both be 4 * the VAE's "
       "latent_channels (32)"},
      {"text_encoder/config.json", [](json& j) { j["num_hidden_layers"] = 12; },
       "text_encoder config: num_hidden_layers 12 is below 27"},
      {"text_encoder/config.json", [](json& j) { j["vocab_size"] = 151644; },
       "tokenizer: <|im_start|> is id 151644, past the text encoder's vocab_size 151644"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    const Refusal r = refusal(c.file, c.edit);
    EXPECT_NE(r.load.find(c.expected), std::string::npos) << r.load;
    EXPECT_EQ(r.load.find('\n'), std::string::npos) << r.load;
    EXPECT_EQ(r.inspect, r.load);  // inspect runs the family's check too
  }
  const Refusal weights = refusal("", nullptr);  // unedited, the copy fails only at its weights
  EXPECT_NE(weights.load.find("safetensors"), std::string::npos) << weights.load;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

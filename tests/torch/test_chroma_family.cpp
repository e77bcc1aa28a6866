// The Chroma family beyond its image goldens (test_pipeline_parity.cpp): its row, the prompt encoding
// against _get_t5_prompt_embeds (T5 with the tokenizer's mask, the transformer's text mask), and the
// refusal of components that do not belong together, before any weights load, by load and by inspect
// alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "dpinfer/pipeline/families/chroma.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"
#include "torch/model_goldens.h"

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

void write_json(const std::string& path, const json& j) { test::write_file(path, j.dump(2)); }

TEST(ChromaFamily, RowHasDiffusersDefaultsAndSettings) {
  const Family* f = find_family("ChromaPipeline");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "chroma");
  EXPECT_EQ(f->label, "Chroma");
  EXPECT_EQ(f->default_steps, 35);             // ChromaPipeline.__call__'s num_inference_steps
  EXPECT_DOUBLE_EQ(f->default_guidance_scale, 5.0);  // and guidance_scale
  EXPECT_EQ(f->size_multiple, 16);
  // max_sequence_length, then DBCache's options (cache-dit's Chroma adapter; no First Block Cache in diffusers).
  ASSERT_EQ(f->settings.size(), 8u);
  EXPECT_EQ(f->settings[0].name, "max_sequence_length");
  EXPECT_EQ(f->settings[1].name, "dbcache");
  EXPECT_EQ(f->settings[7].name, "taylorseer_order");
}

// components.safetensors of make_chroma_pipelines.py: per text and max_sequence_length 512 and 16, the
// T5 ids, the tokenizer's mask, _get_t5_prompt_embeds' states (T5 given that mask) and its text mask.
TEST(ChromaFamily, PromptEncodingMatchesGetT5PromptEmbeds) {
  c10::InferenceMode guard;
  for (const std::string name : {"tiny-chroma", "tiny-chroma-alt"}) {
    const ModelDir md = resolve_model(kPipelines + "/" + name);
    const std::unique_ptr<Tokenizer> tokenizer =
        find_tokenizer_class(md.at("tokenizer").class_name)->load(md.at("tokenizer").path);
    auto t5 = load_component_as<T5EncoderModelImpl>(md.at("text_encoder"), at::TensorOptions().dtype(at::kFloat));
    const test::GoldenFile golden(kPipelines + "/" + name + ".golden/components.safetensors");
    const json doc = read_json(kPipelines + "/" + name + ".golden/cases.json");
    ASSERT_FALSE(doc.at("components").empty());
    for (size_t i = 0; i < doc.at("components").size(); ++i) {
      const json& rec = doc.at("components")[i];
      for (const auto& [length, keys] : rec.at("t5").items()) {
        const std::string what = name + " text " + std::to_string(i) + " at " + length;
        const Encoding e = tokenizer->encode(rec.at("text").get<std::string>(), std::stoi(length));
        const at::Tensor ids = at::tensor(e.ids, at::kLong).view({1, -1});
        const at::Tensor mask = at::tensor(e.attention_mask, at::kLong).view({1, -1});
        EXPECT_TRUE(at::equal(ids, golden[keys.at("ids").get<std::string>()])) << what;
        EXPECT_TRUE(at::equal(mask, golden[keys.at("tokenizer_mask").get<std::string>()])) << what;
        const at::Tensor states = golden[keys.at("last_hidden_state").get<std::string>()];
        const at::Tensor out = t5->forward(ids, mask);
        test::expect_close(out, states, what, test::kParityTolerance);
        const at::Tensor text_mask = golden[keys.at("transformer_mask").get<std::string>()];
        EXPECT_TRUE(at::equal(chroma_text_mask(mask, at::kFloat), text_mask)) << what;
      }
    }
  }
}

/// What loading a copy of tiny-chroma whose weight files are garbage, with `edit` applied, fails
/// with, and what `dpinfer inspect` reports as its error. A refusal must name the mismatch, not a
/// weight file, so it comes before any weights load.
struct Refusal {
  std::string load, inspect;
};

Refusal refusal(const std::function<void(const std::string&)>& edit) {
  test::TempDir dir;
  const std::string root = dir.file("m");
  fs::copy(kPipelines + "/tiny-chroma", root, fs::copy_options::recursive);
  for (const char* f : {"transformer/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors",
                        "vae/diffusion_pytorch_model.safetensors"})
    test::write_file(root + "/" + f, "not safetensors");
  edit(root);
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

void edit_config(const std::string& path, const std::function<void(json&)>& edit) {
  json j = read_json(path);
  edit(j);
  write_json(path, j);
}

TEST(ChromaFamily, ComponentsThatDoNotBelongTogetherAreRefusedBeforeWeightsLoad) {
  struct Case {
    std::string what, file;
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases{
      {"text width", "text_encoder/config.json", [](json& j) { j["d_model"] = 40; },
       "transformer config: joint_attention_dim 32 is not text_encoder's (T5) d_model 40; the components do not "
       "belong together"},
      {"latent channels", "vae/config.json", [](json& j) { j["latent_channels"] = 4; },
       "transformer config: in_channels 4 and patch_size^2 * out_channels 4 must both be 4 * the VAE's "
       "latent_channels (16)"},
      {"shift factor", "vae/config.json", [](json& j) { j["shift_factor"] = nullptr; },
       "vae config: shift_factor is missing or null, and ChromaPipeline decodes latents / scaling_factor + "
       "shift_factor"},
      {"vocabulary", "text_encoder/config.json", [](json& j) { j["vocab_size"] = 10; },
       "more than text_encoder's (T5) vocab_size 10"},
      {"approximator", "transformer/config.json", [](json& j) { j["approximator_num_channels"] = 18; },
       "transformer config: approximator_num_channels = 18 must be a multiple of 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Refusal r = refusal([&](const std::string& root) { edit_config(root + "/" + c.file, c.edit); });
    EXPECT_NE(r.load.find(c.expected), std::string::npos) << r.load;
    EXPECT_EQ(r.load.find('\n'), std::string::npos) << r.load;
    EXPECT_EQ(r.inspect, r.load);  // inspect runs the family's check too
  }
  // Unedited, the same copy fails only at its weights.
  const Refusal weights = refusal([](const std::string&) {});
  EXPECT_NE(weights.load.find("safetensors"), std::string::npos) << weights.load;
}

TEST(ChromaFamily, WrongComponentClassIsRefused) {
  const Refusal r = refusal([](const std::string& root) {
    edit_config(root + "/model_index.json", [](json& j) { j["text_encoder"] = {"transformers", "CLIPTextModel"}; });
  });
  EXPECT_NE(r.load.find("CLIPTextModel"), std::string::npos) << r.load;
  EXPECT_NE(r.load.find("T5EncoderModel"), std::string::npos) << r.load;
  EXPECT_EQ(r.inspect, r.load);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

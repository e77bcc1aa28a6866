// The Z-Image family beyond its image goldens (test_pipeline_parity.cpp): its row, the chat
// template string, what a loaded tiny-z-image reports, cancellation between steps, and the
// refusal of components that do not belong together, before any weights load, by load and
// by inspect alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/families/z_image.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
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

void write_json(const std::string& path, const json& j) { test::write_file(path, j.dump(2)); }

TEST(ZImageFamily, RowHasDiffusersDefaultsAndSettings) {
  const Family* f = find_family("ZImagePipeline");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "z-image");
  EXPECT_EQ(f->label, "Z-Image");
  EXPECT_EQ(f->default_steps, 50);              // ZImagePipeline.__call__'s num_inference_steps
  EXPECT_EQ(f->default_guidance_scale, 5.0);    // and guidance_scale
  EXPECT_EQ(f->size_multiple, 16);              // vae_scale_factor * 2 of the real VAE
  EXPECT_EQ(f->prediction, Prediction::kFlowVelocity);
  std::vector<std::string> components, settings;
  for (const ComponentSpec& c : f->components) components.push_back(c.name);
  for (const SettingSpec& s : f->settings) settings.push_back(s.name);
  EXPECT_EQ(components, (std::vector<std::string>{"transformer", "text_encoder", "tokenizer", "vae", "scheduler"}));
  // ZImagePipeline.__call__'s own, then DBCache's (cache-dit's Z-Image adapter; off by default)
  EXPECT_EQ(settings, (std::vector<std::string>{"max_sequence_length", "cfg_normalization", "cfg_truncation", "dbcache",
                                                "dbcache_fn", "dbcache_bn", "dbcache_warmup", "dbcache_max_cached",
                                                "dbcache_max_continuous", "taylorseer_order"}));
  EXPECT_EQ(f->settings[0].default_value, 512);
  EXPECT_EQ(f->settings[1].default_value, 0.0);
  EXPECT_EQ(f->settings[2].default_value, 1.0);
}

// The string apply_chat_template rendered for the golden cases (make_z_image_pipelines.py).
TEST(ZImageFamily, ChatPromptIsQwen3TemplateWithThinking) {
  const json doc = read_json(kPipelines + "/tiny-z-image.golden/cases.json");
  EXPECT_EQ(z_image_chat_prompt("a photograph of an astronaut riding a horse"),
            doc["chat_template_example"].get<std::string>());
  EXPECT_EQ(z_image_chat_prompt(""), "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ZImageFamily, LoadedPipelineReportsItsFamilyAndSizes) {
  LoadRequest r;
  r.model = kPipelines + "/tiny-z-image";
  r.settings = {{"cfg_truncation", 0.5}};
  auto pipe = load_text_to_image(r);
  const PipelineInfo& info = pipe->info();
  EXPECT_EQ(info.family, "z-image");
  EXPECT_EQ(info.pipeline_class, "ZImagePipeline");
  EXPECT_EQ(info.scheduler_name, "flow_match_euler");
  // ZImagePipeline's 1024 x 1024, cut to what the RoPE table covers: axes_lens [256, 32, 32] patches of
  // 2 latents of 2 pixels (diffusers fails at 1024 on this fixture).
  EXPECT_EQ(info.default_width, 128);
  EXPECT_EQ(info.default_height, 128);
  EXPECT_EQ(info.size_multiple, 4);  // the tiny VAE's scale factor is 2
  json settings = info.settings;
  for (const char* key : {"dbcache", "dbcache_fn", "dbcache_bn", "dbcache_warmup", "dbcache_max_cached",
                          "dbcache_max_continuous", "taylorseer_order"})
    settings.erase(key);  // DBCache's, at their defaults (ZImageFamily.RowHasDiffusersDefaultsAndSettings)
  EXPECT_EQ(info.settings["dbcache"], 0.0);
  EXPECT_EQ(settings, (json{{"max_sequence_length", 512}, {"cfg_normalization", 0.0}, {"cfg_truncation", 0.5}}));
}

TEST(ZImageFamily, SizesMustBeMultiplesOfTwiceTheVaeScaleFactor) {
  LoadRequest r;
  r.model = kPipelines + "/tiny-z-image-alt";  // scale factor 4: multiples of 8
  auto pipe = load_text_to_image(r);
  ImageRequest item;
  item.prompt = "x";
  item.steps = 1;
  item.width = 36;
  item.height = 32;
  EXPECT_THROW(pipe->generate({item}), InputError);
}

TEST(ZImageFamily, CancelledBetweenSteps) {
  LoadRequest r;
  r.model = kPipelines + "/tiny-z-image";
  auto pipe = load_text_to_image(r);
  int asked = 0;
  pipe->set_cancel_check([&asked] { return ++asked == 3; });
  ImageRequest item;
  item.prompt = "a red cube";
  item.steps = 5;
  item.guidance_scale = 0.0;
  item.width = item.height = 16;
  EXPECT_THROW(pipe->generate({item}), Cancelled);
  EXPECT_EQ(asked, 3);
}

/// What loading a copy of tiny-z-image whose weight files are garbage, with `edit` applied,
/// fails with, and what `dpinfer inspect` reports as its error. A refusal must name the
/// mismatch, not a weight file, so it comes before any weights load.
struct Refusal {
  std::string load, inspect;
};

Refusal refusal(const std::function<void(const std::string&)>& edit) {
  test::TempDir dir;
  const std::string root = dir.file("m");
  fs::copy(kPipelines + "/tiny-z-image", root, fs::copy_options::recursive);
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

TEST(ZImageFamily, ComponentsThatDoNotBelongTogetherAreRefusedBeforeWeightsLoad) {
  struct Case {
    std::string what, file;
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases{
      {"caption width", "transformer/config.json", [](json& j) { j["cap_feat_dim"] = 24; },
       "transformer config: cap_feat_dim 24 is not the text encoder's hidden_size 16; the components do not "
       "belong together"},
      {"latent channels", "vae/config.json", [](json& j) { j["latent_channels"] = 4; },
       "transformer config: in_channels 16 is not the VAE's latent_channels 4; the components do not belong "
       "together"},
      {"patch size", "transformer/config.json",
       [](json& j) {
         j["all_patch_size"] = {1};
         j["all_f_patch_size"] = {1};
       },
       "transformer config: all_patch_size / all_f_patch_size have no (2, 1) pair, the patch size "
       "ZImagePipeline runs the transformer with"},
      {"shift factor", "vae/config.json", [](json& j) { j["shift_factor"] = nullptr; },
       "vae config: shift_factor is missing or null"},
      {"vocabulary", "text_encoder/config.json", [](json& j) { j["vocab_size"] = 151644; },
       "tokenizer: <|im_start|> is id 151644, past the text encoder's vocab_size 151644; the components do not "
       "belong together"},
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

TEST(ZImageFamily, WrongComponentClassIsRefused) {
  const Refusal r = refusal([](const std::string& root) {
    edit_config(root + "/model_index.json", [](json& j) { j["text_encoder"] = {"transformers", "CLIPTextModel"}; });
  });
  EXPECT_NE(r.load.find("CLIPTextModel"), std::string::npos) << r.load;
  EXPECT_NE(r.load.find("Qwen3Model"), std::string::npos) << r.load;
  EXPECT_EQ(r.inspect, r.load);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

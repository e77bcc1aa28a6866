// LoRAs against diffusers 0.36 + peft 0.17 (tools/fixtures/make_lora_fixtures.py): the merged
// weights bit for bit (fp32, CPU), the images within issue 4's bound, set after set in one
// pipeline without reloading it, and the bad inputs refused in one line.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

#include <fstream>
#include <set>
#include <map>
#include <memory>
#include <string>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/util/error.h"
#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"
#include "support/image_compare.h"

using namespace dpinfer;
using nlohmann::json;

namespace {

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kLoras = kData + "/loras/";

json cases_of(const std::string& pipeline) {
  std::ifstream in(kLoras + pipeline + "-lora.golden/cases.json");
  return json::parse(in);
}

io::LoraSet set_of(const json& c) {
  io::LoraSet set;
  for (const json& l : c["loras"]) set.push_back({kLoras + l[0].get<std::string>(), l[1].get<double>()});
  return set;
}

/// The model components of a tiny pipeline, loaded in fp32 on the CPU, with a merger over them.
struct Components {
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;
  std::unique_ptr<pipeline::LoraMerger> merger;
};

Components load_components(const std::string& pipeline, const std::vector<std::string>& names) {
  const pipeline::ModelDir md = pipeline::resolve_model(kData + "/pipelines/" + pipeline);
  Components out;
  const auto unet = pipeline::UNetConfig::from_json(md.at("unet").config);
  out.merger = std::make_unique<pipeline::LoraMerger>(
      pipeline::LoraModelFacts{"test", unet.layers_per_block.front()});
  c10::InferenceMode guard;
  for (const std::string& n : names) {
    out.modules[n] = pipeline::load_component(md.at(n), at::TensorOptions().dtype(at::kFloat));
    out.merger->add_component(n, *out.modules[n]);
  }
  return out;
}

std::map<std::string, at::Tensor> weights_of(const Components& c) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, module] : c.modules)
    for (const auto& p : module->named_parameters(true)) out[name + "." + p.key()] = p.value().clone();
  return out;
}

class LoraMergeParity : public ::testing::TestWithParam<std::string> {};

// Every case (one LoRA, a scaled one, two at once) leaves every weight exactly as diffusers'
// fuse_lora does: the touched ones bit for bit, the rest untouched; and a case after a case
// (restore, then merge) is the same as a case on fresh weights.
TEST_P(LoraMergeParity, MergedWeightsAreDiffusersBitForBit) {
  const std::string name = GetParam();
  const json doc = cases_of(name);
  std::vector<std::string> components{"unet", "text_encoder"};
  if (name == "tiny-sdxl") components.push_back("text_encoder_2");
  Components c = load_components(name, components);
  const auto original = weights_of(c);
  test::GoldenFile golden(kLoras + name + "-lora.golden/merged.safetensors");
  for (const json& cs : doc["cases"]) {
    SCOPED_TRACE(cs["name"].get<std::string>());
    ASSERT_TRUE(c.merger->apply(set_of(cs)));
    const auto now = weights_of(c);
    std::set<std::string> merged;
    for (const json& k : cs["merged_keys"]) merged.insert(k.get<std::string>());
    size_t changed = 0;
    for (const auto& [key, value] : now) {
      if (merged.count(key)) {
        const at::Tensor want = golden[cs["name"].get<std::string>() + "/" + key];
        if (test::recorded_on_this_cpu()) {
          ASSERT_TRUE(at::equal(value, want)) << key << ": max |diff| " << (value - want).abs().max().item<double>();
        } else {
          // B @ A sums in this CPU's order (fixture_cpu.h): the delta itself within the parity bound.
          test::expect_close(value - original.at(key), want - original.at(key), key + " LoRA delta");
        }
        ++changed;
      } else {
        ASSERT_TRUE(at::equal(value, original.at(key))) << key << " changed, but diffusers leaves it";
      }
    }
    EXPECT_EQ(changed, merged.size());
  }
  // Back to no LoRA: the original weights, bit for bit.
  ASSERT_TRUE(c.merger->apply({}));
  for (const auto& [key, value] : weights_of(c)) ASSERT_TRUE(at::equal(value, original.at(key))) << key;
  EXPECT_FALSE(c.merger->apply({}));
}

INSTANTIATE_TEST_SUITE_P(Pipelines, LoraMergeParity, ::testing::Values("tiny-sd1", "tiny-sdxl"));

class LoraImageParity : public ::testing::TestWithParam<std::string> {};

// The images of diffusers' fused pipeline, case after case from one loaded pipeline (each
// batch puts its own LoRA set in place), and the image without LoRA the same before and after.
TEST_P(LoraImageParity, ImagesMatchDiffusersWithoutReloading) {
  const std::string name = GetParam();
  const json doc = cases_of(name);
  pipeline::LoadRequest r;
  r.model = kData + "/pipelines/" + name;
  auto pipe = pipeline::load_text_to_image(r);
  const auto images = io::SafetensorsFile::open(kLoras + name + "-lora.golden/images.safetensors");
  const auto request = [&](const json& cs, io::LoraSet loras) {
    pipeline::ImageRequest q;
    q.prompt = doc["prompt"].get<std::string>();
    q.seed = cs["seed"].get<uint64_t>();
    q.steps = cs["steps"].get<int>();
    q.guidance_scale = cs["guidance_scale"].get<double>();
    q.width = pipe->info().default_width;
    q.height = pipe->info().default_height;
    q.settings = pipe->info().settings;
    q.loras = std::move(loras);
    return q;
  };
  const json& first = doc["cases"][0];
  const std::vector<uint8_t> plain_before = pipe->generate({request(first, {})})[0].pixels;
  for (const json& cs : doc["cases"]) {
    SCOPED_TRACE(cs["name"].get<std::string>());
    pipe->check_loras(set_of(cs));
    const pipeline::RgbImage got = pipe->generate({request(cs, set_of(cs))})[0];
    const io::TensorView* want = images->find(cs["name"].get<std::string>());
    ASSERT_NE(want, nullptr);
    ASSERT_EQ(got.pixels.size(), want->nbytes);
    test::expect_within_rounding(got.pixels.data(), reinterpret_cast<const uint8_t*>(want->data), want->nbytes,
                                 name + " " + cs["name"].get<std::string>());
  }
  // The text encoders' cache is keyed by the LoRAs: the plain image comes back exactly.
  EXPECT_EQ(pipe->generate({request(first, {})})[0].pixels, plain_before);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, LoraImageParity, ::testing::Values("tiny-sd1", "tiny-sdxl"));

std::string refusal(const std::string& pipeline, const std::string& lora) {
  pipeline::LoadRequest r;
  r.model = kData + "/pipelines/" + pipeline;
  auto pipe = pipeline::load_text_to_image(r);
  try {
    pipe->check_loras({{kLoras + lora, 1.0}});
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LoraBadInput, ALoraForATransformerModelIsRefusedByName) {
  const std::string why = refusal("tiny-sd1", "other-family.safetensors");
  EXPECT_NE(why.find("other-family.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("none of its 1 LoRA layer(s) match"), std::string::npos) << why;
  EXPECT_NE(why.find("transformer (DiT) model"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

TEST(LoraBadInput, AnSd1LoraOnSdxlSaysHowManyLayersMatch) {
  // tiny-sd1's text encoder layers are tiny-sdxl's text_encoder's too (both CLIPs of width 32,
  // "lora_te_"), but its UNet blocks are not where SDXL has them.
  const std::string why = refusal("tiny-sdxl", "sd1-kohya.safetensors");
  EXPECT_NE(why.find("sd1-kohya.safetensors"), std::string::npos) << why;
  EXPECT_TRUE(why.find(" of its 90 LoRA layers match") != std::string::npos ||
              why.find("do not fit") != std::string::npos)
      << why;
}

TEST(LoraBadInput, AFamilyWithoutLoraSupportRefusesAny) {
  pipeline::LoadRequest r;
  r.model = kData + "/pipelines/tiny-z-image";
  auto pipe = pipeline::load_text_to_image(r);
  try {
    pipe->check_loras({{kLoras + "sd1-peft.safetensors", 1.0}});
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("take no LoRA"), std::string::npos) << e.what();
  }
}

}  // namespace

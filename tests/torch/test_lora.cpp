// LoRAs against diffusers 0.36 + peft 0.17 (tools/fixtures/make_lora_fixtures.py for SD1 and SDXL,
// make_dit_lora_fixtures.py for FLUX.1, Chroma, SD3.5, Qwen-Image and Z-Image, make_dora_lora_fixtures.py for
// DoRA): the merged weights
// bit for bit (fp32, CPU), the images within issue 4's bound, set after set in one pipeline without
// reloading it, and the bad inputs refused in one line.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <iostream>
#include <set>
#include <map>
#include <memory>
#include <string>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/device_memory.h"
#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/lora.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/util/error.h"
#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"
#include "support/image_compare.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// A weight a LoRA merged into: diffusers' `want` bit for bit where this CPU computes as the one
/// that recorded it (`recorded_canary`, fixture_cpu.h); elsewhere B @ A sums in this CPU's order,
/// and the delta itself is held to the parity bound.
void expect_merged_weight(const at::Tensor& value, const at::Tensor& want, const at::Tensor& original,
                          const std::string& key, const at::Tensor& recorded_canary) {
  if (test::recorded_on_this_cpu(recorded_canary)) {
    ASSERT_TRUE(at::equal(value, want)) << key << ": max |diff| " << (value - want).abs().max().item<double>();
  } else {
    test::expect_close(value - original, want - original, key + " LoRA delta");
  }
}

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

Components load_components(const std::string& pipeline, const std::vector<std::string>& names,
                           const at::Device& device = at::kCPU) {
  const pipeline::ModelDir md = pipeline::resolve_model(kData + "/pipelines/" + pipeline);
  Components out;
  const auto unet = pipeline::UNetConfig::from_json(md.at("unet").config);
  // The family's rules, as the pipelines build them (SDXL's maps kohya's original block names; SD 1.x's refuses them).
  const pipeline::LoraKeyRules rules =
      pipeline == "tiny-sdxl" ? pipeline::stable_diffusion_xl_lora_rules() : pipeline::stable_diffusion_lora_rules();
  out.merger = std::make_unique<pipeline::LoraMerger>(
      pipeline::LoraModelFacts{"test", unet.layers_per_block.front(), rules});
  c10::InferenceMode guard;
  for (const std::string& n : names) {
    out.modules[n] = pipeline::load_component(md.at(n), at::TensorOptions().dtype(at::kFloat).device(device));
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
        ASSERT_NO_FATAL_FAILURE(expect_merged_weight(value, want, original.at(key), key, at::Tensor()));
        ++changed;
      } else {
        ASSERT_TRUE(at::equal(value, original.at(key))) << key << " changed, but diffusers leaves it";
      }
    }
    EXPECT_EQ(changed, merged.size());
  }
  // The first case again: its files were dropped when its set went (only the set in place stays read), so they
  // are read again, to the same merged weights.
  const json& first = doc["cases"][0];
  ASSERT_TRUE(c.merger->apply(set_of(first)));
  const auto again = weights_of(c);
  for (const json& k : first["merged_keys"]) {
    const std::string key = k.get<std::string>();
    ASSERT_NO_FATAL_FAILURE(expect_merged_weight(again.at(key), golden[first["name"].get<std::string>() + "/" + key],
                                                 original.at(key), key, at::Tensor()));
  }
  // Back to no LoRA: the original weights, bit for bit.
  ASSERT_TRUE(c.merger->apply({}));
  for (const auto& [key, value] : weights_of(c)) ASSERT_TRUE(at::equal(value, original.at(key))) << key;
  EXPECT_FALSE(c.merger->apply({}));
}

INSTANTIATE_TEST_SUITE_P(Pipelines, LoraMergeParity, ::testing::Values("tiny-sd1", "tiny-sdxl"));

// On a GPU a merge keeps nothing on the device: the touched weights' originals and the merged LoRA's factors wait
// in host memory (each layer's factors go to the device for its merge only). Before, a LoRA on every attention and
// MLP layer kept a second copy of most of the denoiser on the device, which no memory plan counted. The merged
// weights are the CPU merge's within float32 rounding (another matmul). Run by tools/device/gpu_check.sh.
TEST(LoraMergeCuda, TheOriginalsAndFactorsWaitInHostMemory_CUDA) {
  const json doc = cases_of("tiny-sd1");
  const json& cs = doc["cases"][0];
  const at::Device cuda("cuda:0");
  Components gpu = load_components("tiny-sd1", {"unet", "text_encoder"}, cuda);
  Components cpu = load_components("tiny-sd1", {"unet", "text_encoder"});
  pipeline::DeviceMemory::start_counting("cuda:0");
  {
    c10::InferenceMode guard;
    (void)at::matmul(at::ones({64, 64}, cuda), at::ones({64, 64}, cuda));  // cuBLAS's workspace, before counting
  }
  const int64_t before = pipeline::DeviceMemory::allocated_bytes("cuda:0");
  ASSERT_TRUE(gpu.merger->apply(set_of(cs)));
  const int64_t after = pipeline::DeviceMemory::allocated_bytes("cuda:0");
  ASSERT_TRUE(cpu.merger->apply(set_of(cs)));
  const auto on_gpu = weights_of(gpu), on_cpu = weights_of(cpu);
  int64_t touched = 0;
  for (const json& k : cs["merged_keys"]) {
    const std::string key = k.get<std::string>();
    touched += on_gpu.at(key).numel() * 4;
    EXPECT_TRUE(at::allclose(on_gpu.at(key).cpu(), on_cpu.at(key), 1e-5, 1e-6)) << key;
  }
  ASSERT_GT(touched, 0);
  EXPECT_LT(after - before, touched / 2) << "a merge left " << after - before << " bytes on the device; the "
                                         << "touched weights are " << touched;
  ASSERT_TRUE(gpu.merger->apply({}));  // the originals come back from host memory, bit for bit
  const auto restored = weights_of(gpu);
  Components fresh = load_components("tiny-sd1", {"unet", "text_encoder"});
  for (const auto& [key, value] : weights_of(fresh)) ASSERT_TRUE(at::equal(restored.at(key).cpu(), value)) << key;
}

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

// ---- The DiT families (issue 14): tools/fixtures/make_dit_lora_fixtures.py -> tests/data/loras-dit/ ----

const std::string kDitLoras = kData + "/loras-dit/";

json dit_cases_of(const std::string& pipeline, const std::string& loras = kDitLoras) {
  std::ifstream in(loras + pipeline + "-lora.golden/cases.json");
  return json::parse(in);
}

io::LoraSet dit_set_of(const json& c, const std::string& loras = kDitLoras) {
  io::LoraSet set;
  for (const json& l : c["loras"]) set.push_back({loras + l[0].get<std::string>(), l[1].get<double>()});
  return set;
}

/// Through the family's own key rules: the weights diffusers' fuse_lora changes are the ones dpinfer
/// changes, the values of each case with a merged golden bit for bit (fp32, CPU), the rest untouched,
/// and no LoRA gives the original weights back. `name`: the golden's ("<name>-lora.golden", whose
/// cases.json names its pipeline); `loras`: the fixture folder (LoRA files, goldens and the recording
/// machine's cpu_canary).
void expect_merges_as_diffusers(const std::string& name, const std::string& loras) {
  const json doc = dit_cases_of(name, loras);
  pipeline::ModelDir md = pipeline::resolve_model(kData + "/pipelines/" + doc["pipeline"].get<std::string>());
  const pipeline::Family* family = pipeline::find_family(md.model_index.value("_class_name", std::string()));
  ASSERT_NE(family, nullptr);
  int64_t layers_per_block = 2;
  for (pipeline::Component& component : md.components) {
    if (component.name != "unet") continue;
    if (doc.contains("unet")) {  // a UNet folder of the fixture's in place of the pipeline's
      component.path = loras + doc["unet"].get<std::string>();
      std::ifstream config(component.path + "/config.json");
      component.config = json::parse(config);
    }
    layers_per_block = pipeline::UNetConfig::from_json(component.config).layers_per_block.front();
  }
  Components c;
  c.merger = std::make_unique<pipeline::LoraMerger>(
      pipeline::LoraModelFacts{family->label, layers_per_block, family->lora_rules()});
  {
    c10::InferenceMode guard;
    for (const json& n : doc["components"]) {
      c.modules[n] = pipeline::load_component(md.at(n), at::TensorOptions().dtype(at::kFloat));
      c.merger->add_component(n, *c.modules[n]);
    }
  }
  const auto original = weights_of(c);
  // The scripts merge on one thread; a k×k convolution's delta (conv2d(downᵀ, up)) sums in an order that depends
  // on the thread count, in PyTorch as in dpinfer (diffusers on two threads gives other bits too).
  test::OneThread one_thread;
  // "golden_of": a file whose merge diffusers makes bit for bit as another's (its generator asserts it) shares that
  // file's merged weights; this file is still the one merged here.
  const std::string golden_name = doc.value("golden_of", name);
  const auto golden = io::SafetensorsFile::open(loras + golden_name + "-lora.golden/merged.safetensors");
  // The machine that recorded these goldens, for bit identity.
  const at::Tensor canary = test::GoldenFile(loras + "cpu_canary.safetensors")["cpu_canary"];
  size_t compared = 0;
  for (const json& cs : doc["cases"]) {
    const std::string case_name = cs["name"].get<std::string>();
    SCOPED_TRACE(case_name);
    ASSERT_TRUE(c.merger->apply(dit_set_of(cs, loras)));
    std::set<std::string> merged;
    for (const json& k : cs["merged_keys"]) merged.insert(k.get<std::string>());
    size_t changed = 0;
    for (const auto& [key, value] : weights_of(c)) {
      if (!merged.count(key)) {
        ASSERT_TRUE(at::equal(value, original.at(key))) << key << " changed, but diffusers leaves it";
        continue;
      }
      ++changed;
      const io::TensorView* want = golden->find(case_name + "/" + key);
      if (!want) continue;  // make_dit_lora_fixtures.py records no values for its first case (its image is)
      ASSERT_EQ(want->nbytes, static_cast<size_t>(value.numel()) * 4) << key;
      const at::Tensor w = at::from_blob(const_cast<std::byte*>(want->data), value.sizes(), at::kFloat);
      ASSERT_NO_FATAL_FAILURE(expect_merged_weight(value, w, original.at(key), key, canary));
      ++compared;
    }
    EXPECT_EQ(changed, merged.size());
  }
  EXPECT_GT(compared, 0u);
  ASSERT_TRUE(c.merger->apply({}));
  for (const auto& [key, value] : weights_of(c)) ASSERT_TRUE(at::equal(value, original.at(key))) << key;
}

class DitLoraMergeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(DitLoraMergeParity, MergedWeightsAreDiffusersBitForBit) { expect_merges_as_diffusers(GetParam(), kDitLoras); }

INSTANTIATE_TEST_SUITE_P(Pipelines, DitLoraMergeParity,
                         ::testing::Values("tiny-flux-dev", "tiny-flux-dev-kohya", "tiny-chroma", "tiny-sd3.5",
                                           "tiny-qwen-image", "tiny-z-image"));

/// The images of diffusers' fused pipeline (one LoRA, another at another scale, both with scales),
/// case after case from one loaded pipeline, and the image without LoRA the same before and after.
/// `name` and `loras` as for expect_merges_as_diffusers.
void expect_images_as_diffusers(const std::string& name, const std::string& loras) {
  const json doc = dit_cases_of(name, loras);
  pipeline::LoadRequest r;
  r.model = kData + "/pipelines/" + doc["pipeline"].get<std::string>();
  auto pipe = pipeline::load_text_to_image(r);
  const auto images = io::SafetensorsFile::open(loras + name + "-lora.golden/images.safetensors");
  const json& asked = doc["dpinfer"];
  const auto request = [&](io::LoraSet set) {
    pipeline::ImageRequest q;
    q.prompt = doc["prompt"].get<std::string>();
    q.seed = doc["call"]["seed"].get<uint64_t>();
    q.steps = asked["steps"].get<int>();
    q.guidance_scale = asked["guidance_scale"].get<double>();
    q.width = asked["width"].get<int>();
    q.height = asked["height"].get<int>();
    q.settings = pipe->info().settings;
    for (const auto& [k, v] : asked["settings"].items()) q.settings[k] = v;
    q.loras = std::move(set);
    return q;
  };
  const std::vector<uint8_t> plain_before = pipe->generate({request({})})[0].pixels;
  for (const json& cs : doc["cases"]) {
    const std::string case_name = cs["name"].get<std::string>();
    SCOPED_TRACE(case_name);
    pipe->check_loras(dit_set_of(cs, loras));
    const pipeline::RgbImage got = pipe->generate({request(dit_set_of(cs, loras))})[0];
    const io::TensorView* want = images->find(case_name);
    ASSERT_NE(want, nullptr);
    ASSERT_EQ(got.pixels.size(), want->nbytes);
    const auto* want_pixels = reinterpret_cast<const uint8_t*>(want->data);
    size_t same = 0;
    int worst = 0;
    for (size_t i = 0; i < want->nbytes; ++i) {
      const int d = std::abs(int(got.pixels[i]) - int(want_pixels[i]));
      worst = std::max(worst, d);
      same += d == 0;
    }
    std::cout << name << " " << case_name << ": max |diff| " << worst << ", " << same << " of " << want->nbytes
              << " values identical\n";
    test::expect_within_rounding(got.pixels.data(), want_pixels, want->nbytes, name + " " + case_name);
    EXPECT_NE(got.pixels, plain_before) << "the LoRA changed nothing";
  }
  EXPECT_EQ(pipe->generate({request({})})[0].pixels, plain_before);
}

class DitLoraImageParity : public ::testing::TestWithParam<std::string> {};

TEST_P(DitLoraImageParity, ImagesMatchDiffusersWithoutReloading) { expect_images_as_diffusers(GetParam(), kDitLoras); }

INSTANTIATE_TEST_SUITE_P(Pipelines, DitLoraImageParity,
                         ::testing::Values("tiny-flux-dev", "tiny-flux-dev-kohya", "tiny-chroma", "tiny-sd3.5",
                                           "tiny-qwen-image", "tiny-z-image"));

std::string dit_refusal(const std::string& pipeline, const std::string& lora_path);

// ---- FLUX.2 [klein] (issue 30): make_flux2_lora_fixtures.py -> tests/data/loras-flux2/, diffusers 0.37's
// Flux2LoraLoaderMixin: diffusers' names, and BFL's (ai-toolkit lora_A/lora_B, ComfyUI lora_down/lora_up, PEFT's
// base_model.model.) through _convert_non_diffusers_flux2_lora_to_diffusers, qkv split into thirds ----

const std::string kFlux2Loras = kData + "/loras-flux2/";

TEST(Flux2Lora, MergedWeightsAreDiffusersBitForBit) { expect_merges_as_diffusers("tiny-flux2-klein", kFlux2Loras); }

TEST(Flux2Lora, ImagesMatchDiffusersWithoutReloading) { expect_images_as_diffusers("tiny-flux2-klein", kFlux2Loras); }

// What diffusers 0.37 fails on (the fixture script asserts it) is refused in one line naming the file.
TEST(Flux2Lora, WhatDiffusersRefusesIsRefusedInOneLine) {
  std::string why = dit_refusal("tiny-flux2-klein", kFlux2Loras + "flux2-bfl-alpha.safetensors");
  EXPECT_NE(why.find("flux2-bfl-alpha.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("drop the alphas"), std::string::npos) << why;
  why = dit_refusal("tiny-flux2-klein", kFlux2Loras + "flux2-peft-alpha.safetensors");
  EXPECT_NE(why.find("flux2-peft-alpha.safetensors"), std::string::npos) << why;
  EXPECT_NE(why, "(accepted)");
  // A FLUX.1 LoRA (other block sizes) on FLUX.2.
  why = dit_refusal("tiny-flux2-klein", kDitLoras + "flux-comfy.safetensors");
  EXPECT_NE(why, "(accepted)");
  EXPECT_NE(why.find("flux-comfy.safetensors"), std::string::npos) << why;
}

std::string dit_refusal(const std::string& pipeline, const std::string& lora_path) {
  pipeline::LoadRequest r;
  r.model = kData + "/pipelines/" + pipeline;
  auto pipe = pipeline::load_text_to_image(r);
  try {
    pipe->check_loras({{lora_path, 1.0}});
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "(accepted)";
}

TEST(DitLoraBadInput, AnSdxlLoraOnFluxIsALoraForAUNetModel) {
  for (const char* file : {"sdxl-kohya.safetensors", "sdxl-peft.safetensors"}) {
    const std::string why = dit_refusal("tiny-flux-dev", kLoras + file);
    EXPECT_NE(why.find(file), std::string::npos) << why;
    EXPECT_NE(why.find("a LoRA for a UNet model"), std::string::npos) << why;
    EXPECT_NE(why.find("not for this FLUX.1 model"), std::string::npos) << why;
  }
}

TEST(DitLoraBadInput, ALoraOfAnotherDitFamilyMatchesNothing) {
  // Qwen-Image's PEFT names on Z-Image: every layer is a transformer's, none is Z-Image's.
  const std::string why = dit_refusal("tiny-z-image", kDitLoras + "qwen-peft.safetensors");
  EXPECT_NE(why.find("none of its"), std::string::npos) << why;
  EXPECT_NE(why.find("use a LoRA made for Z-Image"), std::string::npos) << why;
}

TEST(DitLoraBadInput, ALoraThatMatchesOnlyPartOfTheModelSaysHowMuch) {
  const std::string why = dit_refusal("tiny-flux-dev", kDitLoras + "flux-partial.safetensors");
  EXPECT_NE(why.find("flux-partial.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("1 match nothing"), std::string::npos) << why;
  EXPECT_NE(why.find("transformer.transformer_blocks.7.attn.to_q.lora_"), std::string::npos) << why;
}

/// `source` (a safetensors file) copied to `target` with `metadata` as its header's __metadata__.
void copy_with_metadata(const std::string& source, const std::string& target, const json& metadata) {
  std::ifstream in(source, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json header = json::parse(bytes.substr(8, n));
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const uint64_t size = text.size();
  std::ofstream out(target, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << text << bytes.substr(8 + n);
}

// ---- The LoraConfig diffusers scales by: make_lora_scaling_fixtures.py -> tests/data/loras-scaling/ ----

class LoraScalingParity : public ::testing::TestWithParam<std::string> {};

// flux-metadata: the header's PEFT config (lora_alpha / r, rank_pattern, alpha_pattern with the first
// match winning, a text-encoder config of its own), not the tensors. The others have no metadata, and
// diffusers infers the config: mixed ranks without alphas scale by the first layer's rank / their rank
// (the transformer's first in sorted key order, CLIP's in named_modules order); with alphas on some
// layers, the others take the most common one, and proj_out's alpha reaches every
// single_transformer_blocks.N.proj_out. kohya SD 1.x / SDXL files: the most common alpha, counted in the
// file's key order (text encoders too), reaches the layers without one and the attention projections,
// whose own alpha diffusers files under a name that names no module; the feed-forward layers keep theirs.
// SD3, Chroma (PEFT and kohya FLUX.1 names) and Z-Image (diffusers' names, and the original ones with
// alpha / rank in the factors): the first layer's rank. kohya SDXL files in the original block names on a UNet
// in SDXL's layout (sdxl-3down-unet, input blocks up to 8): the layers in the order SDXL's loader lists them,
// input block 8's before block 4's (a Python set's order), which decides the first rank and a tie of alphas;
// beside layers in diffusers' block names, those in the original ones are dropped (merged and counted nowhere).
// The merged weights are diffusers' at scale 1 and 0.9.
TEST_P(LoraScalingParity, MergedWeightsFollowTheLoraConfigDiffusersBuilds) {
  expect_merges_as_diffusers(GetParam(), kData + "/loras-scaling/");
}

INSTANTIATE_TEST_SUITE_P(Files, LoraScalingParity,
                         ::testing::Values("flux-metadata", "flux-mixed-ranks", "flux-some-alphas", "sd1-mixed-ranks",
                                           "qwen-mixed-ranks", "sd1-kohya-some-alphas", "sdxl-kohya-alphas",
                                           "sd3-mixed-ranks", "chroma-mixed-ranks", "chroma-kohya",
                                           "z-image-mixed-ranks", "z-image-non-diffusers", "sdxl-sgm-first-rank",
                                           "sdxl-sgm-alpha-tie", "sdxl-sgm-and-diffusers-names"));

// ---- SD and SDXL LoRAs in diffusers' older spellings: make_lora_spelling_fixtures.py -> tests/data/loras-spellings/ ----

class LoraSpellingParity : public ::testing::TestWithParam<std::string> {};

// One set of factors per pipeline in PEFT's names and in an older spelling that diffusers 0.36 still loads: the text
// encoders' lora_linear_layer.down/up (diffusers' own DreamBooth LoRA scripts), the UNet's attention processors
// (processor.to_q_lora.down ...) and CLIP's monkey-patched attention (self_attn.to_q_lora.down ...), on SD 1.x,
// SDXL, and the transformers of FLUX.1 and SD3, whose loaders read them too; the UNet's .lora.down/.lora.up (diffusers'
// LoRACompatible layers); Qwen-Image's lora_unet_ (+ .alpha) and diffusion_model. + lora_A/lora_B forms, and Z-Image's
// diffusion_model. + lora_A/lora_B, which their loaders convert (_convert_non_diffusers_{qwen,z_image}_lora_to_diffusers).
// Each merges as diffusers merges it, at scale 1 and 0.9; diffusers merges the twins alike, so the spellings agree too.
// make_lora_spelling_cell_fixtures.py gives every other cell of docs/lora.md's survey table its golden: those spellings
// on the other families (a file whose diffusers merge equals its PEFT twin's shares the twin's merged weights,
// "golden_of"), Qwen-Image's / Z-Image's bare names with an .alpha or "default.", and, recorded at scale 0.9, the
// lora_adapter_metadata header, DoRA, Chroma's .alpha / ComfyUI / kohya-beside-transformer. files and SDXL's LoCon.
TEST_P(LoraSpellingParity, MergedWeightsAreDiffusersBitForBit) {
  expect_merges_as_diffusers(GetParam(), kData + "/loras-spellings/");
}

INSTANTIATE_TEST_SUITE_P(Files, LoraSpellingParity,
                         ::testing::Values("sdxl-peft", "sdxl-lora-linear-layer", "sd1-peft", "sd1-attn-processor",
                                           "flux-peft", "flux-attn-processor", "sd3-peft", "sd3-attn-processor",
                                           "sd1-lora-dot", "qwen-peft", "qwen-lora-unet", "qwen-diffusion-model-peft",
                                           "z-image-peft", "z-image-diffusion-model-peft",
                                           // make_lora_spelling_cell_fixtures.py: the survey table's other cells
                                           "sd1-lora-linear-layer", "sd1-metadata", "sdxl-lora-dot",
                                           "sdxl-attn-processor", "sdxl-metadata", "sdxl-dora", "sdxl-locon",
                                           "sd3-lora-dot", "sd3-lora-linear-layer", "sd3-metadata", "sd3-dora",
                                           "flux-lora-dot", "flux-clip-attn-processor", "chroma-peft",
                                           "chroma-lora-dot", "chroma-attn-processor", "chroma-alpha",
                                           "chroma-metadata", "chroma-dora", "chroma-comfy", "chroma-kohya-peft",
                                           "qwen-lora-dot", "qwen-attn-processor", "qwen-bare-alpha",
                                           "qwen-bare-default", "qwen-metadata", "qwen-dora", "z-image-lora-dot",
                                           "z-image-attn-processor", "z-image-bare-alpha", "z-image-bare-default",
                                           "z-image-metadata", "z-image-dora"));

// ---- FLUX.1's XLabs files and those in diffusers' underscored names (lora_transformer_, lora_te1_):
// make_flux_lora_format_fixtures.py -> tests/data/loras-flux-formats/ ----

class FluxLoraFormatParity : public ::testing::TestWithParam<std::string> {};

// flux-xlabs: qkv_lora up factors split in thirds (a block-diagonal one too, which XLabs' converter does not
// split by blocks), no alphas, PEFT's lora_alpha the first layer's rank in the converter's order.
// flux-mixture: alpha / rank in the factors, a bf16 alpha divided in bf16, CLIP layers of two ranks.
// chroma-xlabs (the same XLabs file) and chroma-mixture (no CLIP layers) on Chroma, which loads LoRAs as FLUX.1.
TEST_P(FluxLoraFormatParity, MergedWeightsAreDiffusersBitForBit) {
  expect_merges_as_diffusers(GetParam(), kData + "/loras-flux-formats/");
}

// tiny-flux-dev-formats: the XLabs file alone (its image), the mixture at 0.75 and both, merged weights and images.
INSTANTIATE_TEST_SUITE_P(Files, FluxLoraFormatParity,
                         ::testing::Values("flux-xlabs", "flux-mixture", "tiny-flux-dev-formats", "chroma-xlabs",
                                           "chroma-mixture", "tiny-chroma-formats"));

TEST(FluxLoraFormatImages, XlabsAndUnderscoredLorasMakeDiffusersImages) {
  expect_images_as_diffusers("tiny-flux-dev-formats", kData + "/loras-flux-formats/");
}

TEST(FluxLoraFormatImages, XlabsAndUnderscoredLorasMakeDiffusersImagesOnChroma) {
  expect_images_as_diffusers("tiny-chroma-formats", kData + "/loras-flux-formats/");
}

// ---- DoRA: make_dora_lora_fixtures.py -> tests/data/loras-dora/ ----

const std::string kDoraLoras = kData + "/loras-dora/";

class DoraLoraParity : public ::testing::TestWithParam<std::string> {};

// PEFT's DoRA merge, W' = m / ||W + dW|| * (W + dW) with the norm per output row: tiny-sd1's attention Linears, 3x3
// and 1x1 convs (magnitude [1, out, 1, 1]) and CLIP layers, at ranks 2 and 3 (the first rank / 3 scaling); tiny-flux-dev's
// transformer and CLIP. At scale 1 and 0.8, and with a plain LoRA on some of the same weights before and after it
// (each merge takes the norm of the weight the one before left). A kohya file's dora_scale tensors are dropped, as
// diffusers 0.36 drops them: a plain merge.
TEST_P(DoraLoraParity, MergedWeightsAreDiffusersBitForBit) { expect_merges_as_diffusers(GetParam(), kDoraLoras); }

TEST_P(DoraLoraParity, ImagesMatchDiffusersWithoutReloading) { expect_images_as_diffusers(GetParam(), kDoraLoras); }

INSTANTIATE_TEST_SUITE_P(Files, DoraLoraParity, ::testing::Values("tiny-sd1-dora", "tiny-flux-dev-dora"));

TEST(DoraLoraBadInput, MetadataUseDoraMustAgreeWithTheMagnitudes) {
  // flux-dora: rank 2 everywhere, a lora_magnitude_vector on every layer; flux-plain: rank 3, none.
  test::TempDir dir;
  const std::string file = dir.file("flux-dora-meta.safetensors");
  const auto with = [&](bool transformer_dora, bool text_encoder_dora, const std::string& source, int rank = 2) {
    const json adapter = {{"transformer.r", rank},     {"transformer.lora_alpha", 2},
                          {"transformer.use_dora", transformer_dora}, {"text_encoder.r", 2},
                          {"text_encoder.lora_alpha", 2}, {"text_encoder.use_dora", text_encoder_dora}};
    copy_with_metadata(kDoraLoras + source, file, {{"format", "pt"}, {"lora_adapter_metadata", adapter.dump()}});
    return dit_refusal("tiny-flux-dev", file);
  };
  EXPECT_EQ(with(true, true, "flux-dora.safetensors"), "(accepted)");
  std::string why = with(true, false, "flux-dora.safetensors");
  EXPECT_NE(why.find("says text_encoder.use_dora false, but layer 'text_encoder.text_model.encoder.layers.0.self_attn."),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("has a DoRA magnitude"), std::string::npos) << why;
  why = with(true, false, "flux-plain.safetensors", 3);  // rank 3, transformer layers only
  EXPECT_NE(why.find("says transformer.use_dora true"), std::string::npos) << why;
  EXPECT_NE(why.find("has no DoRA magnitude"), std::string::npos) << why;
}

TEST(DitLoraBadInput, MetadataThatDiffusersCannotLoadEitherIsRefusedInOneLine) {
  // flux-peft is rank 2 on every layer, with no .alpha tensors; flux-alpha has .alpha tensors.
  test::TempDir dir;
  const std::string file = dir.file("flux-meta.safetensors");
  const auto with = [&](const json& adapter, const std::string& source = "flux-peft.safetensors") {
    copy_with_metadata(kDitLoras + source, file, {{"format", "pt"}, {"lora_adapter_metadata", adapter.dump()}});
    return dit_refusal("tiny-flux-dev", file);
  };
  const json both = {{"transformer.r", 2}, {"transformer.lora_alpha", 1}, {"text_encoder.r", 2},
                     {"text_encoder.lora_alpha", 2}};
  EXPECT_EQ(with(both), "(accepted)");
  std::string why = with({{"transformer.r", 2}, {"transformer.lora_alpha", 2}});
  // The file first: the worker puts "--lora: " or "'p.jsonl' line 3: " before it.
  EXPECT_EQ(why.rfind("'" + file + "': its lora_adapter_metadata", 0), 0u) << why;
  EXPECT_NE(why.find("configures no text_encoder"), std::string::npos) << why;
  json other_rank = both;
  other_rank["transformer.rank_pattern"] = {{"proj_out", 4}};
  why = with(other_rank);
  EXPECT_NE(why.find("gives 'transformer.proj_out' rank 4, but its factors have rank 2"), std::string::npos) << why;
  why = with({{"transformer.r", 4}, {"transformer.lora_alpha", 2}}, "flux-alpha.safetensors");
  EXPECT_NE(why.find(".alpha' and a lora_adapter_metadata"), std::string::npos) << why;
}

TEST(DitLoraBadInput, BflNamesWithLoraAFactorsAreRefusedAsDiffusersReadsNothingFromThem) {
  // diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight: diffusers 0.36 loads no layer of it.
  const std::string why = dit_refusal("tiny-flux-dev", kDitLoras + "flux-bfl-peft.safetensors");
  EXPECT_NE(why.find("flux-bfl-peft.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("BFL's FLUX.1 block names with lora_A/lora_B factors"), std::string::npos) << why;
  EXPECT_NE(why.find("lora_A.weight"), std::string::npos) << why;  // what to use instead
}

TEST(DitLoraBadInput, AnUnderscoredFluxLoraWithClipLayersIsRefusedOnChroma) {
  // flux-mixture has lora_te1_ CLIP layers: ChromaPipeline (FluxLoraLoaderMixin) converts them to text_encoder
  // layers, which its T5 does not have, and diffusers 0.36 fails (get_peft_kwargs: list index out of range).
  const std::string why = dit_refusal("tiny-chroma", kData + "/loras-flux-formats/flux-mixture.safetensors");
  EXPECT_NE(why.find("flux-mixture.safetensors': CLIP layer 'lora_te1_"), std::string::npos) << why;
  EXPECT_NE(why.find("this Chroma model has no CLIP text encoder"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

TEST(DitLoraBadInput, AKohyaFluxLoraOnSdxlIsALoraForFlux) {
  // (An SDXL kohya LoRA on FLUX.1: AnSdxlLoraOnFluxIsALoraForAUNetModel.)
  const std::string why = dit_refusal("tiny-sdxl", kDitLoras + "flux-kohya.safetensors");
  EXPECT_NE(why.find("flux-kohya.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("a FLUX.1 LoRA (BFL's block names"), std::string::npos) << why;
  EXPECT_NE(why.find("not for this Stable Diffusion XL model"), std::string::npos) << why;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

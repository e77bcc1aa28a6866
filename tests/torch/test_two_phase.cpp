// Two-phase chunks (issue 26; TextToImage::prepare, LoadRequest::two_phase, --encode-chunk) on a tiny
// pipeline of every family: the images are those of the same pipeline without two-phase, bit for bit
// (which test_pipeline_parity.cpp holds to diffusers' goldens); the text encoders and the denoiser
// are never resident together; a LoRA set on a text encoder that was released and loaded again gives
// its diffusers images; and the cache of encodings keys every setting that reaches an encoder, so
// that a prompt encoded ahead under one clip_skip, max_sequence_length or LoRA set is not taken for
// another.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/load.h"
#include "support/image_compare.h"
#include "support/param_names.h"
#include "torch/golden_case.h"

using namespace dpinfer;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kLoras = kData + "/loras/";

std::unique_ptr<pipeline::TextToImage> load(const std::string& model, bool two_phase) {
  pipeline::LoadRequest r;
  r.model = model;
  r.two_phase = two_phase;
  return pipeline::load_text_to_image(r);
}

bool is_text_encoder(const std::string& component) { return component.rfind("text_encoder", 0) == 0; }

/// Which kinds of module a resident_components() list holds.
struct Residency {
  bool encoders = false, denoiser = false;
};
Residency residency(const std::vector<std::string>& components) {
  Residency r;
  for (const std::string& c : components) (is_text_encoder(c) ? r.encoders : r.denoiser) = true;
  return r;
}

void expect_same_images(const std::vector<pipeline::RgbImage>& got, const std::vector<pipeline::RgbImage>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(got[k].pixels == want[k].pixels) << what << ", image " << k;
}

class TwoPhaseParity : public ::testing::TestWithParam<std::string> {};

// Chunks of three golden batches, each encoded ahead and then made, against the same batches made by
// a pipeline without two-phase; the cancel check, asked between prepare()'s batches and between
// denoising steps, sees what is resident.
TEST_P(TwoPhaseParity, ChunksEncodedAheadMakeTheImagesOfAPipelineWithoutThem) {
  const std::string name = GetParam();
  const json doc = test::golden_cases_doc(name);
  const std::string model = test::golden_model_dir(doc);
  auto plain = load(model, false);
  const auto batches = test::golden_batches(doc, 30, plain.get());
  ASSERT_GE(batches.size(), 2u) << name;
  auto two = load(model, true);
  const Residency loaded = residency(two->resident_components());
  EXPECT_TRUE(loaded.encoders && !loaded.denoiser) << name << ": after the load, the text encoders alone";
  const auto has_vae = [](const std::vector<std::string>& on_device) {
    return std::find(on_device.begin(), on_device.end(), "vae") != on_device.end();
  };
  EXPECT_FALSE(has_vae(two->components_on_device())) << name << ": after the load, the VAE not loaded yet";
  std::vector<std::vector<std::string>> seen;
  bool vae_beside_encoders = false;
  two->set_cancel_check([&] {
    seen.push_back(two->resident_components());
    vae_beside_encoders = vae_beside_encoders || (residency(seen.back()).encoders && has_vae(two->components_on_device()));
    return false;
  });
  for (size_t begin = 0; begin < batches.size(); begin += 3) {
    const std::vector<std::vector<pipeline::ImageRequest>> chunk(
        batches.begin() + static_cast<std::ptrdiff_t>(begin),
        batches.begin() + static_cast<std::ptrdiff_t>(std::min(begin + 3, batches.size())));
    two->prepare(chunk);
    const Residency after = residency(two->resident_components());
    EXPECT_TRUE(after.denoiser && !after.encoders) << name << ": after prepare(), the denoiser alone";
    for (size_t k = 0; k < chunk.size(); ++k)
      expect_same_images(two->generate(chunk[k]), plain->generate(chunk[k]),
                         name + " batch " + std::to_string(begin + k));
  }
  bool encoders_seen = false;
  for (const std::vector<std::string>& components : seen) {
    const Residency r = residency(components);
    EXPECT_FALSE(r.encoders && r.denoiser) << name << ": the text encoders and the denoiser resident together";
    encoders_seen = encoders_seen || r.encoders;
  }
  EXPECT_TRUE(encoders_seen) << name << ": prepare() never had the text encoders resident";
  EXPECT_FALSE(vae_beside_encoders) << name << ": the VAE resident while the text encoders encoded a chunk";
}

INSTANTIATE_TEST_SUITE_P(Families, TwoPhaseParity,
                         ::testing::Values("tiny-sd1", "tiny-sdxl", "tiny-sd3.5-t5", "tiny-flux-dev", "tiny-chroma",
                                           "tiny-qwen-image", "tiny-z-image", "tiny-flux2-klein", "tiny-flux2-dev",
                                           "tiny-qwen-image-edit/edit"),
                         dpinfer::test::FixtureParamName());

TEST(TwoPhase, WithoutItEveryModuleStaysResident) {
  auto pipe = load(kData + "/pipelines/tiny-sd1", false);
  const std::vector<std::string> all{"text_encoder", "unet"};
  EXPECT_EQ(pipe->resident_components(), all);
  pipeline::ImageRequest r;
  r.prompt = "a red cube";
  r.steps = 1;
  r.guidance_scale = 7.5;
  r.width = r.height = 64;
  r.settings = pipe->info().settings;
  pipe->generate({r});
  EXPECT_EQ(pipe->resident_components(), all);
}

// tools/fixtures/make_lora_fixtures.py's cases (LoRAs on the text encoder and the UNet, one, two,
// scaled), each between two batches without LoRAs, encoded ahead as one chunk: the text encoder is
// released with one set merged and loaded again under another, and each image is diffusers'. Then a
// prompt not encoded ahead, under a LoRA set: the encoder comes back with the set merged into it.
TEST(TwoPhase, LorasOnAReleasedTextEncoderGiveTheirImages) {
  for (const std::string name : {"tiny-sd1", "tiny-sdxl"}) {
    SCOPED_TRACE(name);
    std::ifstream in(kLoras + name + "-lora.golden/cases.json");
    const json doc = json::parse(in);
    const auto images = io::SafetensorsFile::open(kLoras + name + "-lora.golden/images.safetensors");
    auto plain = load(kData + "/pipelines/" + name, false);
    auto two = load(kData + "/pipelines/" + name, true);
    const auto request = [&](const json& c, const std::string& prompt) {
      pipeline::ImageRequest q;
      q.prompt = prompt;
      q.seed = c["seed"].get<uint64_t>();
      q.steps = c["steps"].get<int>();
      q.guidance_scale = c["guidance_scale"].get<double>();
      q.width = two->info().default_width;
      q.height = two->info().default_height;
      q.settings = two->info().settings;
      for (const json& l : c["loras"]) q.loras.push_back({kLoras + l[0].get<std::string>(), l[1].get<double>()});
      return q;
    };
    std::vector<std::vector<pipeline::ImageRequest>> chunk;
    for (const json& c : doc["cases"]) {
      pipeline::ImageRequest with = request(c, doc["prompt"].get<std::string>());
      plain->check_loras(with.loras);
      two->check_loras(with.loras);
      pipeline::ImageRequest without = with;
      without.loras.clear();
      chunk.push_back({without});
      chunk.push_back({with});
    }
    two->prepare(chunk);
    for (size_t k = 0; k < chunk.size(); ++k) {
      const std::vector<pipeline::RgbImage> got = two->generate(chunk[k]);
      expect_same_images(got, plain->generate(chunk[k]), "batch " + std::to_string(k));
      if (k % 2 == 0) continue;
      const std::string case_name = doc["cases"][k / 2]["name"].get<std::string>();
      const io::TensorView* want = images->find(case_name);
      ASSERT_NE(want, nullptr) << case_name;
      ASSERT_EQ(got[0].pixels.size(), want->nbytes);
      test::expect_within_rounding(got[0].pixels.data(), reinterpret_cast<const uint8_t*>(want->data), want->nbytes,
                                   name + " " + case_name);
    }
    const pipeline::ImageRequest unprepared = request(doc["cases"][0], "a red cube on a table");
    ASSERT_FALSE(unprepared.loras.empty());
    expect_same_images(two->generate({unprepared}), plain->generate({unprepared}), "a prompt not encoded ahead");
    const Residency after = residency(two->resident_components());
    EXPECT_TRUE(after.denoiser && !after.encoders) << "the encoders went again once the prompt was encoded";
  }
}

/// `base` with setting `key` set to `value`.
pipeline::ImageRequest with_setting(pipeline::ImageRequest base, const std::string& key, const json& value) {
  base.settings[key] = value;
  return base;
}

/// Encodes `ahead` ahead in a two-phase pipeline of `model`, then makes `asked` (which differs from it
/// in one thing that reaches a text encoder): the image must be the one a pipeline that never saw
/// `ahead` makes, and not `ahead`'s own.
void expect_encoded_apart(const std::string& model, const pipeline::ImageRequest& ahead,
                          const pipeline::ImageRequest& asked, const std::string& what) {
  auto two = load(model, true);
  auto plain = load(model, false);
  for (const io::LoraSet& set : {ahead.loras, asked.loras}) {
    two->check_loras(set);
    plain->check_loras(set);
  }
  two->prepare({{ahead}});
  const std::vector<pipeline::RgbImage> got = two->generate({asked});
  expect_same_images(got, plain->generate({asked}), what);
  EXPECT_FALSE(got[0].pixels == plain->generate({ahead})[0].pixels) << what << ": the change makes no other image";
}

TEST(TwoPhase, TheCacheKeyHoldsEverySettingThatReachesAnEncoder) {
  // A prompt of more than 16 T5 tokens, so that max_sequence_length 16 cuts it.
  const std::string long_prompt =
      "a photograph of an astronaut riding a horse on the moon, with the earth rising behind them, in high detail";
  {
    auto probe = load(kData + "/pipelines/tiny-sd1", false);
    pipeline::ImageRequest r;
    r.prompt = long_prompt;
    r.steps = 2;
    r.guidance_scale = 7.5;
    r.width = r.height = 64;
    r.settings = probe->info().settings;
    expect_encoded_apart(kData + "/pipelines/tiny-sd1", r, with_setting(r, "clip_skip", 1), "SD clip_skip");
    pipeline::ImageRequest lora = r;
    lora.loras.push_back({kLoras + "sd1-kohya.safetensors", 1.0});
    expect_encoded_apart(kData + "/pipelines/tiny-sd1", lora, r, "SD LoRA set");
    pipeline::ImageRequest scaled = lora;
    scaled.loras.front().scale = 0.5;
    expect_encoded_apart(kData + "/pipelines/tiny-sd1", lora, scaled, "SD LoRA scale");
  }
  for (const char* name : {"tiny-sd3.5-t5", "tiny-flux-dev", "tiny-chroma", "tiny-qwen-image", "tiny-z-image"}) {
    const std::string model = kData + "/pipelines/" + name;
    auto probe = load(model, false);
    pipeline::ImageRequest r;
    r.prompt = long_prompt;
    r.steps = 2;
    r.guidance_scale = probe->info().default_guidance_scale;
    r.width = r.height = 2 * probe->info().size_multiple;
    r.settings = probe->info().settings;
    r.settings["max_sequence_length"] = 48;
    expect_encoded_apart(model, r, with_setting(r, "max_sequence_length", 16),
                         std::string(name) + " max_sequence_length");
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

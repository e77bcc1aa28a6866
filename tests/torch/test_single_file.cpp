// Single-file checkpoints (SD 1.x, 2.x, SDXL in the LDM layout): the tiny pipelines converted by
// tools/fixtures/make_single_file_fixtures.py (checked there against diffusers' from_single_file)
// load to exactly the directory's tensors and give the directory's pixels bit for bit; the
// shipped default configs build modules whose keys and shapes are exactly those of the real
// architectures' checkpoints; and bad input is refused in one line.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/single_file/ldm_keys.h"
#include "dpinfer/pipeline/single_file/single_file.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kPipelines = kData + "/pipelines";
const std::string kSingle = kData + "/single_file";
const std::string kConfigs = std::string(DPINFER_TEST_DATA_DIR) + "/../../configs/single_file";

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return std::string("InputError: ") + e.what();
  } catch (const Error& e) {
    return std::string("Error: ") + e.what();
  }
  return "(no error)";
}

#define EXPECT_CONTAINS(haystack, needle)                                     \
  do {                                                                        \
    const std::string h_ = (haystack);                                        \
    EXPECT_NE(h_.find(needle), std::string::npos) << h_ << "\n  lacks: " << (needle); \
  } while (0)

std::map<std::string, at::Tensor> state_of(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters(true)) out[p.key()] = p.value();
  for (const auto& b : m.named_buffers(true)) out[b.key()] = b.value();
  return out;
}

struct Tiny {
  const char* name;
  const char* kind;
  std::vector<const char*> components;
};

const std::vector<Tiny> kTiny = {{"tiny-sd1", "sd1", {"text_encoder", "unet", "vae"}},
                                 {"tiny-sd2v", "sd2", {"text_encoder", "unet", "vae"}},
                                 {"tiny-sdxl", "sdxl", {"text_encoder", "text_encoder_2", "unet", "vae"}}};

TEST(SingleFile, DetectsEachFamilyFromItsProbeKeys) {
  for (const Tiny& t : kTiny) {
    SingleFileOptions o;
    o.base = kPipelines + "/" + t.name;
    const ModelDir md = resolve_model(kSingle + "/" + t.name + ".safetensors", "", nullptr, o);
    ASSERT_TRUE(md.single_file) << t.name;
    EXPECT_EQ(md.single_file->kind, t.kind);
    EXPECT_FALSE(md.single_file->shipped_base);
    EXPECT_EQ(md.name, t.name);
    for (const char* c : t.components) {
      EXPECT_FALSE(md.at(c).single_file.empty()) << t.name << " " << c;
      EXPECT_CONTAINS(md.at(c).source, "single file (");
    }
    EXPECT_EQ(md.single_file->variant.empty(), std::string(t.kind) != "sd2");
  }
}

// Every tensor each component loads from the single file equals the directory's, bit for bit.
TEST(SingleFile, LoadedStateDictsAreTheDirectorysExactly) {
  for (const Tiny& t : kTiny) {
    SingleFileOptions o;
    o.base = kPipelines + "/" + t.name;
    const ModelDir single = resolve_model(kSingle + "/" + t.name + ".safetensors", "", nullptr, o);
    const ModelDir dir = resolve_model(kPipelines + "/" + t.name);
    for (const char* c : t.components) {
      auto a = load_component(single.at(c), at::TensorOptions().dtype(at::kFloat));
      auto b = load_component(dir.at(c), at::TensorOptions().dtype(at::kFloat));
      const auto sa = state_of(*a), sb = state_of(*b);
      ASSERT_EQ(sa.size(), sb.size()) << t.name << " " << c;
      for (const auto& [key, value] : sb) {
        ASSERT_TRUE(sa.count(key)) << key;
        EXPECT_TRUE(torch::equal(sa.at(key), value)) << t.name << " " << c << " " << key;
      }
    }
  }
}

std::vector<uint8_t> pixels(const LoadRequest& r, int steps = 3) {
  auto pipe = load_text_to_image(r);
  ImageRequest item;
  item.prompt = "a photograph of an astronaut riding a horse";
  item.negative_prompt = "blurry";
  item.seed = 7;
  item.steps = steps;
  item.guidance_scale = 5.0;
  item.width = 32;
  item.height = 32;
  std::vector<RgbImage> out = pipe->generate({item});
  return out.at(0).pixels;
}

TEST(SingleFile, PixelsAreTheDirectorysBitForBit) {
  for (const Tiny& t : kTiny) {
    LoadRequest single, dir;
    single.model = kSingle + "/" + t.name + ".safetensors";
    single.base = kPipelines + "/" + t.name;
    dir.model = kPipelines + "/" + t.name;
    EXPECT_EQ(pixels(single), pixels(dir)) << t.name;
  }
}

// A UNet-only file takes the VAE and the text encoder from --vae / --text-encoder folders.
TEST(SingleFile, MissingComponentsComeFromTheirOptions) {
  LoadRequest r;
  r.model = kSingle + "/tiny-sd1-unet-only.safetensors";
  r.base = kPipelines + "/tiny-sd1";  // the tiny architecture; its weights are used for what the file lacks
  LoadRequest dir;
  dir.model = kPipelines + "/tiny-sd1";
  const auto want = pixels(dir, 2);
  EXPECT_EQ(pixels(r, 2), want);

  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd1";
  o.vae = kPipelines + "/tiny-sd1/vae";
  o.text_encoder = kPipelines + "/tiny-sd1/text_encoder";
  const ModelDir md = resolve_model(r.model, "", nullptr, o);
  EXPECT_CONTAINS(md.at("vae").source, "--vae ");
  EXPECT_CONTAINS(md.at("text_encoder").source, "--text-encoder ");
  EXPECT_CONTAINS(md.at("unet").source, "single file (model.diffusion_model.*");
  r.vae = o.vae;
  r.text_encoder = o.text_encoder;
  EXPECT_EQ(pixels(r, 2), want);
}

TEST(SingleFile, BadInputIsOneLineNamingTheFileAndWhatToDo) {
  test::TempDir tmp;
  // No VAE, shipped base (no weights): the error names what is missing and how to give it.
  {
    LoadRequest r;
    r.model = kSingle + "/tiny-sd1-unet-only.safetensors";
    SingleFileOptions o;
    o.base = kConfigs + "/sd1";
    const std::string e = error_of([&] { resolve_model(r.model, "", nullptr, o); });
    EXPECT_CONTAINS(e, "InputError: '" + r.model + "' has no vae (no first_stage_model.* keys); give it with --vae DIR");
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  // A pickle.
  test::write_file(tmp.file("model.ckpt"), "PK\x03\x04");
  EXPECT_CONTAINS(error_of([&] { resolve_model(tmp.file("model.ckpt")); }),
                  "is a pickle, which dpinfer never loads (it can run code); convert it once in python with diffusers");
  // Not safetensors.
  test::write_file(tmp.file("junk.safetensors"), "not a safetensors file at all");
  EXPECT_CONTAINS(error_of([&] { resolve_model(tmp.file("junk.safetensors")); }),
                  "is not a safetensors checkpoint (");
  // Unknown family: the keys found are listed.
  fs::copy_file(kPipelines + "/tiny-sd1/vae/diffusion_pytorch_model.safetensors", tmp.file("vae.safetensors"));
  const std::string unknown = error_of([&] { resolve_model(tmp.file("vae.safetensors")); });
  EXPECT_CONTAINS(unknown, "is not a single-file checkpoint dpinfer knows: none of its keys start with "
                           "model.diffusion_model.");
  EXPECT_CONTAINS(unknown, "its keys: decoder.");
  // --variant and the completing options are refused where they do not apply.
  EXPECT_CONTAINS(error_of([&] { resolve_model(kSingle + "/tiny-sd1.safetensors", "fp16"); }),
                  "--variant fp16 does not apply to the single file");
  SingleFileOptions o;
  o.vae = "x";
  EXPECT_CONTAINS(error_of([&] { resolve_model(kPipelines + "/tiny-sd1", "", nullptr, o); }),
                  "complete a single-file checkpoint");
  // A base of another family.
  o = {};
  o.base = kPipelines + "/tiny-sdxl";
  EXPECT_CONTAINS(error_of([&] { resolve_model(kSingle + "/tiny-sd1.safetensors", "", nullptr, o); }),
                  "is a Stable Diffusion 1.x checkpoint but --base");
}

TEST(SingleFile, DetectionRefusesKindsItDoesNotRun) {
  auto detect = [](std::vector<SourceTensor> t) {
    return error_of([&] { detect_ldm_checkpoint(t, "m.safetensors"); });
  };
  EXPECT_CONTAINS(detect({{"model.diffusion_model.input_blocks.0.0.weight", {320, 9, 3, 3}}}), "inpainting");
  EXPECT_CONTAINS(detect({{"model.diffusion_model.out.0.weight", {4}}, {"conditioner.embedders.0.model.ln_final.weight", {4}}}),
                  "SDXL refiner");
  EXPECT_CONTAINS(detect({{"double_blocks.0.img_attn.qkv.weight", {9, 3}}}), "FLUX.1 (BFL)");
  const auto k = [](int64_t width) {
    return std::vector<SourceTensor>{
        {"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", {320, width}}};
  };
  EXPECT_EQ(detect_ldm_checkpoint(k(768), "m").kind, "sd1");
  EXPECT_EQ(detect_ldm_checkpoint(k(1024), "m").kind, "sd2");
  EXPECT_EQ(detect_ldm_checkpoint(k(32), "m").kind, "");
  EXPECT_EQ(detect_ldm_checkpoint({{"model.diffusion_model.label_emb.0.0.weight", {1280, 2816}}}, "m").kind, "sdxl");
}

// The shipped default configs are those of the real architectures: the keys and shapes of real
// checkpoints (tests/data/single_file/keys, from diffusers' and transformers' modules built on the
// meta device and converted to the LDM layout) convert to exactly the keys and shapes of the
// modules dpinfer builds from the shipped configs, component by component.
TEST(SingleFile, ShippedConfigsMatchTheRealArchitecturesKeyForKey) {
  for (const char* kind : {"sd1", "sd2", "sdxl"}) {
    std::ifstream in(kSingle + "/keys/" + kind + ".json");
    const json rows = json::parse(in);
    std::vector<SourceTensor> tensors;
    for (const json& row : rows) tensors.push_back({row[0].get<std::string>(), row[1].get<std::vector<int64_t>>()});
    SingleFileOptions o;
    o.base = kConfigs + "/" + kind;
    // Resolving a header-only stand-in would need a file; the components are those of the base.
    const ModelDir base = resolve_model(o.base);
    const std::map<std::string, std::pair<std::string, CheckpointLayout>> slots = {
        {"unet", {"model.diffusion_model.", CheckpointLayout::kLdmUNet}},
        {"vae", {"first_stage_model.", CheckpointLayout::kLdmVae}},
        {"text_encoder",
         std::string(kind) == "sd1"   ? std::make_pair(std::string("cond_stage_model.transformer."), CheckpointLayout::kTransformersClip)
         : std::string(kind) == "sd2" ? std::make_pair(std::string("cond_stage_model.model."), CheckpointLayout::kOpenClip)
                                      : std::make_pair(std::string("conditioner.embedders.0.transformer."),
                                                       CheckpointLayout::kTransformersClip)},
        {"text_encoder_2", {"conditioner.embedders.1.model.", CheckpointLayout::kOpenClip}}};
    size_t converted_total = 0;
    for (const auto& [name, slot] : slots) {
      const Component* c = base.find(name);
      if (!c) continue;
      Component sc = *c;
      sc.single_file = "keys.json";
      sc.key_prefix = slot.first;
      sc.layout = slot.second;
      const std::vector<TensorPart> parts = single_file_converter(sc)(tensors);
      auto module = find_model_class(c->class_name)->build(c->config, at::TensorOptions().device(at::kMeta));
      std::map<std::string, std::vector<int64_t>> want;
      for (const auto& [key, t] : state_of(*module))
        if (key.find("position_ids") == std::string::npos) want[key] = t.sizes().vec();
      std::map<std::string, std::vector<int64_t>> got;
      for (const TensorPart& p : parts) got[p.target] = p.shape;
      EXPECT_EQ(got.size(), parts.size()) << kind << " " << name << ": a key converted twice";
      EXPECT_EQ(got, want) << kind << " " << name;
      converted_total += parts.size();
    }
    // Every tensor of the list belongs to one component (q/k/v of a fused in_proj count thrice).
    size_t fused = 0;
    for (const SourceTensor& t : tensors)
      if (t.name.find(".attn.in_proj_") != std::string::npos) ++fused;
    EXPECT_EQ(converted_total, tensors.size() + 2 * fused) << kind;
  }
}

TEST(SingleFile, InspectSaysItIsASingleFileAndWhereEachComponentComesFrom) {
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd2v";
  const InspectReport report = inspect_model(kSingle + "/tiny-sd2v.safetensors", "", "", o);
  ASSERT_TRUE(report.ok()) << report.error;
  ASSERT_TRUE(report.single_file);
  EXPECT_EQ(report.single_file->kind, "sd2");
  const json j = report.to_json();
  EXPECT_EQ(j["single_file"]["kind"], "sd2");
  EXPECT_EQ(j["components"]["unet"]["source"], "single file (model.diffusion_model.*, LDM UNet)");
  EXPECT_EQ(j["components"]["text_encoder"]["source"], "single file (cond_stage_model.model.*, OpenCLIP)");
  EXPECT_TRUE(j["components"]["text_encoder"]["keys"]["ok"].get<bool>());
  const std::string text = report.to_text();
  EXPECT_CONTAINS(text, "single file: ");
  EXPECT_CONTAINS(text, "Stable Diffusion 2.x (LDM single file)");
  EXPECT_CONTAINS(text, "detected: v_prediction");
}

}  // namespace
}  // namespace dpinfer::pipeline

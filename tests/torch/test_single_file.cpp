// Single-file checkpoints (SD 1.x, 2.x, SDXL in the LDM layout; FLUX.1 and Chroma transformers in Black
// Forest Labs' layout; SD3 / SD3.5 files as Stability AI ships them; Qwen-Image transformers as ComfyUI
// splits them; Z-Image transformers in their original layout): the tiny pipelines converted by
// tools/fixtures/make_single_file_fixtures.py and make_dit_single_file_fixtures.py (checked there
// against diffusers' own conversion) load to
// exactly the directory's tensors and give the directory's pixels bit for bit; the shipped default
// configs build modules whose keys and shapes are exactly those of the real architectures'
// checkpoints; and bad input is refused in one line.
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>  // torch::Tensor and its factories: not all of <torch/torch.h> (jit, optim, data)

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/conversion/flux_bfl_keys.h"
#include "dpinfer/pipeline/conversion/ldm_keys.h"
#include "dpinfer/pipeline/conversion/sd3_keys.h"
#include "dpinfer/pipeline/conversion/z_image_keys.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/single_file/dit_detection.h"
#include "dpinfer/pipeline/single_file/single_file.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

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

/// While alive, the shipped default configs are this checkout's (DPINFER_DATA_DIR = the repository).
class CheckoutDataDir {
 public:
  CheckoutDataDir() : was_set_(std::getenv("DPINFER_DATA_DIR") != nullptr) {
    if (was_set_) saved_ = std::getenv("DPINFER_DATA_DIR");
    ::setenv("DPINFER_DATA_DIR", (kData + "/../..").c_str(), 1);
  }
  ~CheckoutDataDir() { was_set_ ? ::setenv("DPINFER_DATA_DIR", saved_.c_str(), 1) : ::unsetenv("DPINFER_DATA_DIR"); }

 private:
  bool was_set_;
  std::string saved_;
};

std::map<std::string, at::Tensor> state_of(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters(true)) out[p.key()] = p.value();
  for (const auto& b : m.named_buffers(true)) out[b.key()] = b.value();
  return out;
}

/// Component `c` loaded from the single file and from the directory: the same tensors, bit for bit.
void expect_component_is_the_directorys(const ModelDir& single, const ModelDir& dir, const std::string& c,
                                        const std::string& what) {
  auto a = load_component(single.at(c), at::TensorOptions().dtype(at::kFloat));
  auto b = load_component(dir.at(c), at::TensorOptions().dtype(at::kFloat));
  const auto sa = state_of(*a), sb = state_of(*b);
  ASSERT_EQ(sa.size(), sb.size()) << what << " " << c;
  for (const auto& [key, value] : sb) {
    ASSERT_TRUE(sa.count(key)) << what << " " << key;
    EXPECT_TRUE(torch::equal(sa.at(key), value)) << what << " " << c << " " << key;
  }
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
    for (const char* c : t.components) expect_component_is_the_directorys(single, dir, c, t.name);
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
  // A LoRA given as the model.
  EXPECT_CONTAINS(error_of([&] { resolve_model(kData + "/loras/sdxl-kohya.safetensors"); }),
                  "sdxl-kohya.safetensors' is a LoRA (its key 'lora_");
  EXPECT_CONTAINS(error_of([&] { resolve_model(kData + "/loras-dit/flux-peft.safetensors"); }),
                  "), not a model: give it with --lora, and the model it was made for with --model");
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
  EXPECT_CONTAINS(detect({{"joint_blocks.0.x_block.attn.qkv.weight", {9, 3}}}),
                  "InputError: 'm.safetensors' has SD3 MMDiT keys (joint_blocks.*) but not the first block's context "
                  "modulation joint_blocks.0.context_block.adaLN_modulation.1.bias");
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

// ---- FLUX.1 transformers in Black Forest Labs' layout.

struct TinyFlux {
  const char* file;  // tests/data/single_file/<file>.safetensors
  const char* pipeline;
  const char* kind;
  const char* prefix;
};
const std::vector<TinyFlux> kTinyFlux = {{"tiny-flux-dev-bfl", "tiny-flux-dev", "flux-dev", ""},
                                         {"tiny-flux-schnell-comfy", "tiny-flux-schnell", "flux-schnell",
                                          "model.diffusion_model."},
                                         {"tiny-flux-fill-bfl", "tiny-flux-fill", "flux-fill", ""}};

TEST(SingleFile, FluxBflFilesAreDetectedAndTakeTheRestFromTheBase) {
  for (const TinyFlux& t : kTinyFlux) {
    SingleFileOptions o;
    o.base = kPipelines + "/" + t.pipeline;
    const ModelDir md = resolve_model(kSingle + "/" + t.file + ".safetensors", "", nullptr, o);
    ASSERT_TRUE(md.single_file) << t.file;
    EXPECT_EQ(md.single_file->kind, t.kind);
    EXPECT_EQ(md.name, t.file);
    EXPECT_EQ(md.at("transformer").source, "single file (" + std::string(t.prefix) + "*, BFL FLUX.1)");
    EXPECT_EQ(md.at("transformer").key_prefix, t.prefix);
    for (const char* c : {"vae", "text_encoder", "text_encoder_2"}) {
      EXPECT_TRUE(md.at(c).single_file.empty()) << c;
      EXPECT_CONTAINS(md.at(c).source, "--base ");
    }
  }
}

// The transformer read from the BFL file (fused q/k/v and q/k/v/mlp rows, the final AdaLN's halves
// swapped) equals the directory's, bit for bit.
TEST(SingleFile, FluxBflTransformerIsTheDirectorysExactly) {
  for (const TinyFlux& t : kTinyFlux) {
    SingleFileOptions o;
    o.base = kPipelines + "/" + t.pipeline;
    const ModelDir single = resolve_model(kSingle + "/" + t.file + ".safetensors", "", nullptr, o);
    const ModelDir dir = resolve_model(kPipelines + "/" + t.pipeline);
    expect_component_is_the_directorys(single, dir, "transformer", t.file);
  }
}

TEST(SingleFile, FluxBflPixelsAreTheDirectorysBitForBit) {
  for (const TinyFlux& t : kTinyFlux) {
    if (std::string(t.kind) == "flux-fill") continue;  // its items need an image and a mask: FluxFillFileInpaints...
    LoadRequest single, dir;
    single.model = kSingle + "/" + t.file + ".safetensors";
    single.base = kPipelines + "/" + t.pipeline;
    dir.model = kPipelines + "/" + t.pipeline;
    EXPECT_EQ(pixels(single, 2), pixels(dir, 2)) << t.file;
  }
  // The VAE and both text encoders as folders of their own, with the base for the configs.
  LoadRequest r;
  r.model = kSingle + "/tiny-flux-dev-bfl.safetensors";
  r.base = kPipelines + "/tiny-flux-dev";
  r.vae = kPipelines + "/tiny-flux-dev/vae";
  r.text_encoder = kPipelines + "/tiny-flux-dev/text_encoder";
  r.text_encoder_2 = kPipelines + "/tiny-flux-dev/text_encoder_2";
  LoadRequest dir;
  dir.model = kPipelines + "/tiny-flux-dev";
  EXPECT_EQ(pixels(r, 2), pixels(dir, 2));
}

// A FLUX.1 Fill transformer file (black-forest-labs' flux1-fill-dev.safetensors: img_in takes the latents, the masked
// image's latents and the mask) inpaints as its directory does, bit for bit: the same item (an image and a mask,
// FluxFillPipeline's strength 1) from tiny-flux-fill's transformer in BFL layout with the folder as --base.
TEST(SingleFile, FluxFillFileInpaintsAsItsDirectoryBitForBit) {
  auto inpaint = [](const LoadRequest& r) {
    auto pipe = load_text_to_image(r);
    ImageRequest item;
    item.prompt = "a red cube on a wooden table";
    item.seed = 11;
    item.steps = 3;
    item.guidance_scale = 30.0;  // FluxFillPipeline's default
    item.width = 32;
    item.height = 32;
    auto image = std::make_shared<RgbImage>();
    image->width = image->height = 32;
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c) image->pixels.push_back(static_cast<uint8_t>((x * 8 + y * 3 + c * 70) % 256));
    auto mask = std::make_shared<GrayImage>();
    mask->width = mask->height = 32;
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) mask->pixels.push_back(x >= 8 && x < 24 && y >= 8 && y < 24 ? 255 : 0);
    item.image = image;
    item.mask = mask;
    item.strength = 1.0;
    return pipe->generate({item}).at(0).pixels;
  };
  LoadRequest single, dir;
  single.model = kSingle + "/tiny-flux-fill-bfl.safetensors";
  single.base = kPipelines + "/tiny-flux-fill";
  dir.model = kPipelines + "/tiny-flux-fill";
  const std::vector<uint8_t> want = inpaint(dir);
  EXPECT_EQ(inpaint(single), want);
  // The shipped default for Fill files is FluxFillPipeline's, its transformer config made the file's (channels and
  // blocks from its keys); a dev base is refused in one line, naming the channels.
  const CheckoutDataDir data_dir;
  std::vector<ModelDirError> errors;
  const ModelDir shipped = resolve_model(single.model, "", &errors, {});
  ASSERT_TRUE(shipped.single_file && shipped.single_file->shipped_base);
  EXPECT_EQ(shipped.single_file->kind, "flux-fill");
  EXPECT_EQ(shipped.single_file->label, "FLUX.1 Fill [dev] (BFL FLUX.1 transformer file)");
  EXPECT_CONTAINS(shipped.root, "flux-fill");
  EXPECT_EQ(shipped.at("transformer").config["in_channels"], 12);
  EXPECT_EQ(shipped.at("transformer").config["out_channels"], 4);
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-flux-dev";
  const std::string e = error_of([&] { resolve_model(single.model, "", nullptr, o); });
  EXPECT_CONTAINS(e, "'s keys say num_layers 1, num_single_layers 1, guidance_embeds true, in_channels 12, "
                     "out_channels 4 but --base '");
  EXPECT_CONTAINS(e, "in_channels 4, out_channels null; give the base the file belongs to");
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(SingleFile, FluxBflRefusalsAreOneLine) {
  auto detect = [](std::vector<SourceTensor> t) {
    return error_of([&] { detect_dit_checkpoint(t, "f.safetensors"); });
  };
  const SourceTensor probe{"double_blocks.0.img_attn.norm.key_norm.scale", {128}};
  const SourceTensor guidance{"guidance_in.in_layer.bias", {3072}};
  const SourceTensor out_64{"final_layer.linear.weight", {64, 3072}};
  // img_in's channels against final_layer's: Fill 384 of 64, Depth 128 of 64 (refused), dev 64 of 64.
  EXPECT_EQ(detect_dit_checkpoint({probe, guidance, out_64, {"img_in.weight", {3072, 384}}}, "f")->kind, "flux-fill");
  EXPECT_CONTAINS(detect({probe, guidance, out_64, {"img_in.weight", {3072, 128}}}),
                  "InputError: 'f.safetensors' is a FLUX.1 Depth transformer (img_in takes 128 channels");
  // FLUX.2 (BFL's layout, with ComfyUI's prefix or none): [dev] has the guidance embedder, [klein] not.
  const auto flux2 = detect_dit_checkpoint({{"model.diffusion_model.single_stream_modulation.lin.weight", {9, 3}}}, "f");
  ASSERT_TRUE(flux2);
  EXPECT_EQ(flux2->kind, "flux2-klein");
  EXPECT_EQ(flux2->prefix, "model.diffusion_model.");
  EXPECT_EQ(detect_dit_checkpoint({{"single_stream_modulation.lin.weight", {9, 3}},
                                   {"guidance_in.in_layer.weight", {3, 4}}},
                                  "f")
                ->kind,
            "flux2-dev");
  EXPECT_EQ(detect_dit_checkpoint({probe, guidance, {"img_in.weight", {3072, 64}}}, "f")->kind, "flux-dev");
  EXPECT_EQ(detect_dit_checkpoint({probe, {"img_in.weight", {3072, 64}}}, "f")->kind, "flux-schnell");
  EXPECT_FALSE(detect_dit_checkpoint({{"model.diffusion_model.out.0.weight", {4}}}, "f"));

  const std::string dev = kSingle + "/tiny-flux-dev-bfl.safetensors";
  // A base whose transformer config is another architecture (schnell: no guidance, 2 + 2 blocks).
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-flux-schnell";
  std::string e = error_of([&] { resolve_model(dev, "", nullptr, o); });
  EXPECT_CONTAINS(e, "InputError: '" + dev + "''s keys say num_layers 1, num_single_layers 1, guidance_embeds true, "
                     "in_channels 4 but --base '");
  EXPECT_CONTAINS(e, "'s transformer config has num_layers 2, num_single_layers 2, guidance_embeds false, in_channels 64; "
                     "give the base the file belongs to");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // A base of another family.
  o.base = kPipelines + "/tiny-sd1";
  EXPECT_CONTAINS(error_of([&] { resolve_model(dev, "", nullptr, o); }),
                  "is a FLUX.1 [dev] checkpoint but --base");
  // The shipped default (this checkout's configs/single_file): no VAE, no text encoders and no T5
  // vocabulary; each is named with how to give it.
  const CheckoutDataDir data_dir;
  std::vector<ModelDirError> errors;
  const ModelDir md = resolve_model(dev, "", &errors, {});
  std::map<std::string, std::string> by_component;
  for (const ModelDirError& x : errors) by_component[x.component] = x.message;
  EXPECT_CONTAINS(by_component["vae"], "'" + dev + "' is a FLUX.1 [dev] transformer only, without a vae; give it with "
                                       "--vae DIR (a diffusers/transformers AutoencoderKL folder) or --base DIR|org/name "
                                       "(a FluxPipeline that has one)");
  EXPECT_CONTAINS(by_component["text_encoder_2"], "give it with --text-encoder-2 DIR");
  EXPECT_CONTAINS(by_component["tokenizer_2"], "dpinfer ships no T5 vocabulary for its tokenizer_2; give --base");
  for (const auto& [c, message] : by_component) EXPECT_EQ(message.find('\n'), std::string::npos) << c;
  EXPECT_CONTAINS(error_of([&] { resolve_model(dev); }), "without a vae; give it with --vae DIR");
  // The shipped config's transformer is made the file's: blocks and guidance from its keys.
  ASSERT_TRUE(md.single_file && md.single_file->shipped_base);
  const json& config = md.at("transformer").config;
  EXPECT_EQ(config["num_layers"], 1);
  EXPECT_EQ(config["num_single_layers"], 1);
  EXPECT_EQ(config["guidance_embeds"], true);
  errors.clear();
  const ModelDir schnell = resolve_model(kSingle + "/tiny-flux-schnell-comfy.safetensors", "", &errors, {});
  EXPECT_EQ(schnell.single_file->kind, "flux-schnell");
  EXPECT_CONTAINS(schnell.root, "flux-schnell");
  EXPECT_EQ(schnell.at("transformer").config["num_layers"], 2);
  EXPECT_EQ(schnell.at("transformer").config["guidance_embeds"], false);

  // With the shipped default, a --text-encoder-2 folder that holds T5's spiece.model beside its
  // weights gives tokenizer_2 too; with --vae and --text-encoder nothing is missing.
  test::TempDir tmp;
  const std::string t5 = tmp.file("t5");
  fs::create_directories(t5);
  for (const char* f : {"text_encoder_2/config.json", "text_encoder_2/model.safetensors", "tokenizer_2/spiece.model",
                        "tokenizer_2/tokenizer_config.json", "tokenizer_2/special_tokens_map.json"})
    fs::copy_file(kPipelines + "/tiny-flux-dev/" + f, t5 + "/" + fs::path(f).filename().string());
  SingleFileOptions parts;
  parts.vae = kPipelines + "/tiny-flux-dev/vae";
  parts.text_encoder = kPipelines + "/tiny-flux-dev/text_encoder";
  parts.text_encoder_2 = t5;
  errors.clear();
  const ModelDir complete = resolve_model(dev, "", &errors, parts);
  EXPECT_TRUE(errors.empty()) << errors.at(0).message;
  EXPECT_EQ(complete.at("tokenizer_2").path, t5);
  EXPECT_EQ(complete.at("tokenizer_2").source, "--text-encoder-2 " + t5);
  EXPECT_EQ(complete.at("text_encoder_2").source, "--text-encoder-2 " + t5);
}

// The shipped FLUX.1-dev and FLUX.1-Fill-dev configs are the real architectures: the BFL keys and shapes of their
// transformers (keys/<kind>.json, from diffusers' module on the meta device) convert to exactly the keys and shapes
// of the module dpinfer builds from configs/single_file/<kind>, pieces included.
void expect_shipped_flux_config_matches(const std::string& kind) {
  std::ifstream in(kSingle + "/keys/" + kind + ".json");
  const json rows = json::parse(in);
  std::vector<SourceTensor> tensors;
  for (const json& row : rows) tensors.push_back({row[0].get<std::string>(), row[1].get<std::vector<int64_t>>()});
  const FluxBflBlocks blocks = count_flux_bfl_blocks("", tensors);
  EXPECT_EQ(blocks.double_blocks, 19);
  EXPECT_EQ(blocks.single_blocks, 38);
  EXPECT_TRUE(blocks.guidance);
  const ModelDir base = resolve_model(kConfigs + "/" + kind);
  Component c = base.at("transformer");
  c.single_file = "keys.json";
  c.layout = CheckpointLayout::kFluxBfl;
  const std::vector<TensorPart> parts = single_file_converter(c)(tensors);
  auto module = find_model_class(c.class_name)->build(c.config, at::TensorOptions().device(at::kMeta));
  std::map<std::string, std::vector<int64_t>> want;
  for (const auto& [key, t] : state_of(*module)) want[key] = t.sizes().vec();
  std::map<std::string, std::vector<int64_t>> got;
  std::map<std::string, int64_t> rows_filled;
  for (const TensorPart& p : parts) {
    got[p.target] = p.shape;
    rows_filled[p.target] += p.target_row >= 0 ? p.rows : (p.shape.empty() ? 1 : p.shape[0]);
  }
  EXPECT_EQ(got, want);
  for (const auto& [key, shape] : want) EXPECT_EQ(rows_filled[key], shape.empty() ? 1 : shape[0]) << key;
  // Fused: 19 x 4 qkv tensors (weight and bias of two streams) in thirds, 38 x 2 linear1 in four,
  // the final AdaLN's 2 tensors in two pieces.
  EXPECT_EQ(parts.size(), tensors.size() + 19 * 4 * 2 + 38 * 2 * 3 + 2);
}

TEST(SingleFile, ShippedFluxConfigMatchesTheRealArchitectureKeyForKey) {
  for (const char* kind : {"flux-dev", "flux-fill"}) {
    SCOPED_TRACE(kind);
    expect_shipped_flux_config_matches(kind);
  }
}

// ---- Qwen-Image as ComfyUI splits it: diffusers' names under "model.diffusion_model.".

TEST(SingleFile, QwenImageComfyFileIsTheDirectorysBitForBit) {
  const std::string file = kSingle + "/tiny-qwen-image-comfy.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-qwen-image";
  const ModelDir single = resolve_model(file, "", nullptr, o);
  ASSERT_TRUE(single.single_file);
  EXPECT_EQ(single.single_file->kind, "qwen-image");
  EXPECT_EQ(single.at("transformer").source, "single file (model.diffusion_model.*, diffusers names)");
  EXPECT_CONTAINS(single.at("vae").source, "--base ");
  const ModelDir dir = resolve_model(kPipelines + "/tiny-qwen-image");
  expect_component_is_the_directorys(single, dir, "transformer", file);
  LoadRequest r, d;
  r.model = file;
  r.base = o.base;
  r.vae = kPipelines + "/tiny-qwen-image/vae";
  r.text_encoder = kPipelines + "/tiny-qwen-image/text_encoder";
  d.model = kPipelines + "/tiny-qwen-image";
  EXPECT_EQ(pixels(r, 2), pixels(d, 2));
}

TEST(SingleFile, QwenImageRefusalsAreOneLine) {
  const std::string file = kSingle + "/tiny-qwen-image-comfy.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-qwen-image-alt";  // 3 blocks; the file has 2
  const std::string e = error_of([&] { resolve_model(file, "", nullptr, o); });
  EXPECT_CONTAINS(e, "InputError: '" + file + "''s keys say num_layers 2 but --base '");
  EXPECT_CONTAINS(e, "'s transformer config has num_layers 3; give the base the file belongs to");
  o.base = kPipelines + "/tiny-flux-dev";
  EXPECT_CONTAINS(error_of([&] { resolve_model(file, "", nullptr, o); }), "is a Qwen-Image checkpoint but --base");
  o = {};
  o.text_encoder_2 = kPipelines + "/tiny-flux-dev/text_encoder_2";
  o.base = kPipelines + "/tiny-qwen-image";
  EXPECT_CONTAINS(error_of([&] { resolve_model(file, "", nullptr, o); }),
                  "--text-encoder-2 is for SDXL, SD3 and FLUX.1 checkpoints; '" + file + "' is Qwen-Image");
  // The shipped default (Qwen/Qwen-Image's configs, the real Qwen2 vocabulary): the VAE and text
  // encoder are named with how to give them, and num_layers is the file's.
  const CheckoutDataDir data_dir;
  std::vector<ModelDirError> errors;
  const ModelDir md = resolve_model(file, "", &errors, {});
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].component, "vae");
  EXPECT_CONTAINS(errors[0].message, "is a Qwen-Image transformer only, without a vae; give it with --vae DIR");
  EXPECT_EQ(errors[1].component, "text_encoder");
  EXPECT_CONTAINS(errors[1].message, "give it with --text-encoder DIR");
  EXPECT_EQ(md.at("transformer").config["num_layers"], 2);
  EXPECT_EQ(md.at("transformer").config["num_attention_heads"], 24);
}

// ---- Z-Image in its original layout (fused attention.qkv, x_embedder, final_layer).

TEST(SingleFile, ZImageOriginalFileIsTheDirectorysBitForBit) {
  const std::string file = kSingle + "/tiny-z-image-original.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-z-image";
  const ModelDir single = resolve_model(file, "", nullptr, o);
  ASSERT_TRUE(single.single_file);
  EXPECT_EQ(single.single_file->kind, "z-image-turbo");
  EXPECT_EQ(single.at("transformer").source, "single file (*, Z-Image original)");
  const ModelDir dir = resolve_model(kPipelines + "/tiny-z-image");
  expect_component_is_the_directorys(single, dir, "transformer", file);
  LoadRequest r, d;
  r.model = file;
  r.base = o.base;
  d.model = kPipelines + "/tiny-z-image";
  EXPECT_EQ(pixels(r, 2), pixels(d, 2));
}

TEST(SingleFile, ZImageRefusalsAreOneLine) {
  const std::string file = kSingle + "/tiny-z-image-original.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-z-image-alt";  // 2 refiner blocks; the file has 1
  EXPECT_CONTAINS(error_of([&] { resolve_model(file, "", nullptr, o); }),
                  "'s keys say n_layers 2, n_refiner_layers 1 but --base '");
  // Lumina 2's original blocks keep their modulation at adaLN_modulation.1: not Z-Image.
  EXPECT_CONTAINS(error_of([&] {
                    detect_ldm_checkpoint({{"cap_embedder.0.weight", {2304}}, {"layers.0.attention.qkv.weight", {9, 3}},
                                           {"layers.0.adaLN_modulation.1.weight", {9, 3}}},
                                          "l.safetensors");
                  }),
                  "InputError: 'l.safetensors' looks like a Lumina 2 transformer");
  EXPECT_FALSE(detect_dit_checkpoint({{"cap_embedder.0.weight", {2304}}, {"layers.0.attention.qkv.weight", {9, 3}},
                                      {"layers.0.adaLN_modulation.1.weight", {9, 3}}},
                                     "l"));
  // The shipped default (Tongyi-MAI/Z-Image-Turbo's configs): VAE and text encoder named with how to give them.
  const CheckoutDataDir data_dir;
  std::vector<ModelDirError> errors;
  const ModelDir md = resolve_model(file, "", &errors, {});
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_CONTAINS(errors[0].message, "is a Z-Image transformer only, without a vae; give it with --vae DIR");
  EXPECT_CONTAINS(errors[1].message, "without a text_encoder; give it with --text-encoder DIR");
  EXPECT_EQ(md.at("transformer").config["n_refiner_layers"], 1);
  EXPECT_EQ(md.at("transformer").config["dim"], 3840);
}

// The shipped Z-Image-Turbo config is the real architecture: its original keys and shapes
// (keys/z-image-turbo.json, from diffusers' module on the meta device) convert to exactly the keys and
// shapes of the module dpinfer builds from configs/single_file/z-image-turbo.
TEST(SingleFile, ShippedZImageConfigMatchesTheRealArchitectureKeyForKey) {
  std::ifstream in(kSingle + "/keys/z-image-turbo.json");
  const json rows = json::parse(in);
  std::vector<SourceTensor> tensors;
  for (const json& row : rows) tensors.push_back({row[0].get<std::string>(), row[1].get<std::vector<int64_t>>()});
  const ModelDir base = resolve_model(kConfigs + "/z-image-turbo");
  Component c = base.at("transformer");
  c.single_file = "keys.json";
  c.layout = CheckpointLayout::kZImageOriginal;
  const std::vector<TensorPart> parts = single_file_converter(c)(tensors);
  auto module = find_model_class(c.class_name)->build(c.config, at::TensorOptions().device(at::kMeta));
  std::map<std::string, std::vector<int64_t>> want;
  for (const auto& [key, t] : state_of(*module)) want[key] = t.sizes().vec();
  std::map<std::string, std::vector<int64_t>> got;
  for (const TensorPart& p : parts) got[p.target] = p.shape;
  EXPECT_EQ(got.size(), parts.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(parts.size(), tensors.size() + 2 * (30 + 2 + 2));  // each block's qkv in thirds
}

// ---- SD3 / SD3.5 as Stability AI ships them: the MMDiT under model.diffusion_model. (or bare), the
// VAE under first_stage_model., the text encoders under text_encoders.{clip_l,clip_g,t5xxl}.transformer.

// tiny-sd3 with its VAE and both CLIPs (as sd3_medium_incl_clips.safetensors): each component is the
// directory's, but for CLIP-L's text_projection, which diffusers makes the identity for such a file.
TEST(SingleFile, Sd3FileWithClipsLoadsAsDiffusersLoadsIt) {
  const std::string file = kSingle + "/tiny-sd3-incl-clips.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd3";
  const ModelDir single = resolve_model(file, "", nullptr, o);
  ASSERT_TRUE(single.single_file);
  EXPECT_EQ(single.single_file->kind, "sd3");
  EXPECT_EQ(single.single_file->variant, "");  // a tiny MMDiT: none of the released widths
  EXPECT_EQ(single.single_file->label, "Stable Diffusion 3 (SD3 MMDiT single file)");
  EXPECT_EQ(single.at("transformer").source, "single file (model.diffusion_model.*, SD3 MMDiT)");
  EXPECT_EQ(single.at("vae").source, "single file (first_stage_model.*, LDM VAE)");
  EXPECT_EQ(single.at("text_encoder").source, "single file (text_encoders.clip_l.transformer.*, SD3 CLIP-L)");
  EXPECT_EQ(single.at("text_encoder_2").source,
            "single file (text_encoders.clip_g.transformer.*, transformers CLIP)");
  const ModelDir dir = resolve_model(kPipelines + "/tiny-sd3");
  for (const char* c : {"transformer", "vae", "text_encoder_2"})
    expect_component_is_the_directorys(single, dir, c, file);
  auto clip_l = load_component(single.at("text_encoder"), at::TensorOptions().dtype(at::kFloat));
  auto want = load_component(dir.at("text_encoder"), at::TensorOptions().dtype(at::kFloat));
  const auto got = state_of(*clip_l), base = state_of(*want);
  ASSERT_EQ(got.size(), base.size());
  for (const auto& [key, value] : base) {
    if (key == "text_projection.weight")
      EXPECT_TRUE(torch::equal(got.at(key), torch::eye(32)));
    else
      EXPECT_TRUE(torch::equal(got.at(key), value)) << key;
  }
  // It generates (the identity projection changes the pooled embedding, so not the directory's pixels).
  LoadRequest r;
  r.model = file;
  r.base = o.base;
  EXPECT_EQ(pixels(r, 2).size(), 32u * 32u * 3u);
}

// tiny-sd3.5-t5 with its VAE, CLIP-G and T5 (CLIP-L from the base): the directory's pixels bit for bit.
TEST(SingleFile, Sd35FileWithT5IsTheDirectorysBitForBit) {
  const std::string file = kSingle + "/tiny-sd3.5-t5-incl-t5.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd3.5-t5";
  const ModelDir single = resolve_model(file, "", nullptr, o);
  EXPECT_EQ(single.at("text_encoder_3").source, "single file (text_encoders.t5xxl.transformer.*, diffusers names)");
  EXPECT_EQ(single.at("text_encoder").source, "--base " + single.root);
  const ModelDir dir = resolve_model(kPipelines + "/tiny-sd3.5-t5");
  for (const char* c : {"transformer", "vae", "text_encoder_2", "text_encoder_3"})
    expect_component_is_the_directorys(single, dir, c, file);
  LoadRequest r, d;
  r.model = file;
  r.base = o.base;
  d.model = kPipelines + "/tiny-sd3.5-t5";
  EXPECT_EQ(pixels(r, 2), pixels(d, 2));
}

// tiny-sd3.5's MMDiT-X alone, without a prefix (dual attention in blocks 0 and 1, QK RMSNorms): the
// rest from the base; the directory's pixels bit for bit.
TEST(SingleFile, Sd35BareMmditIsTheDirectorysBitForBit) {
  const std::string file = kSingle + "/tiny-sd3.5-mmdit.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd3.5";
  const ModelDir single = resolve_model(file, "", nullptr, o);
  EXPECT_EQ(single.at("transformer").source, "single file (*, SD3 MMDiT)");
  for (const char* c : {"vae", "text_encoder", "text_encoder_2"}) EXPECT_CONTAINS(single.at(c).source, "--base ");
  const ModelDir dir = resolve_model(kPipelines + "/tiny-sd3.5");
  expect_component_is_the_directorys(single, dir, "transformer", file);
  LoadRequest r, d;
  r.model = file;
  r.base = o.base;
  d.model = kPipelines + "/tiny-sd3.5";
  const auto want = pixels(d, 2);
  EXPECT_EQ(pixels(r, 2), want);
  // CLIP-G as a folder of its own (--text-encoder-2 is SD3's second CLIP).
  r.text_encoder_2 = kPipelines + "/tiny-sd3.5/text_encoder_2";
  o.text_encoder_2 = r.text_encoder_2;
  EXPECT_EQ(resolve_model(file, "", nullptr, o).at("text_encoder_2").source, "--text-encoder-2 " + r.text_encoder_2);
  EXPECT_EQ(pixels(r, 2), want);
}

TEST(SingleFile, Sd3DetectionTellsTheReleasedModelsApart) {
  const std::string p = "model.diffusion_model.";
  auto sd3 = [&](int64_t width, int64_t pos_rows, bool large) {
    std::vector<SourceTensor> t{{p + "joint_blocks.0.context_block.adaLN_modulation.1.bias", {width}},
                                {p + "pos_embed", {1, pos_rows, width / 6}}};
    if (large) t.push_back({p + "joint_blocks.37.x_block.mlp.fc1.weight", {9728, 2432}});
    return detect_dit_checkpoint(t, "s.safetensors");
  };
  EXPECT_EQ(sd3(9216, 36864, false)->variant, "SD3 medium");
  EXPECT_EQ(sd3(9216, 147456, false)->variant, "SD3.5 medium");
  EXPECT_EQ(sd3(14592, 36864, true)->variant, "SD3.5 large");
  EXPECT_EQ(sd3(192, 9216, false)->variant, "");
  EXPECT_EQ(sd3(192, 9216, false)->kind, "sd3");
  EXPECT_EQ(sd3(192, 9216, false)->prefix, p);
  EXPECT_EQ(sd3(192, 9216, false)->layout, CheckpointLayout::kSd3Mmdit);
  // What the keys say of the architecture, as convert_sd3_transformer_checkpoint_to_diffusers derives it.
  const Sd3Blocks b = count_sd3_blocks("", {{"joint_blocks.0.x_block.attn2.qkv.weight", {9, 3}},
                                            {"joint_blocks.2.x_block.attn2.ln_q.weight", {3}},
                                            {"joint_blocks.3.context_block.attn.ln_q.weight", {3}},
                                            {"pos_embed", {1, 144, 24}}});
  EXPECT_EQ(b.joint_blocks, 4);
  EXPECT_EQ(b.dual_attention_layers, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(b.qk_norm);
  EXPECT_EQ(b.pos_embed_rows, 144);
}

// The MMDiT conversion's structural rules: fused q/k/v in thirds, and the (shift, scale) halves of the
// final layer's and the last block's context modulation read swapped; the other blocks' as they are.
TEST(SingleFile, Sd3KeyConversionSplitsAndSwapsAsDiffusers) {
  const std::vector<SourceTensor> t{{"joint_blocks.0.context_block.adaLN_modulation.1.weight", {12, 2}},
                                    {"joint_blocks.1.context_block.adaLN_modulation.1.weight", {4, 2}},
                                    {"joint_blocks.1.x_block.attn.qkv.bias", {6}},
                                    {"final_layer.adaLN_modulation.1.bias", {4}}};
  const std::vector<TensorPart> parts = convert_sd3_keys("", t);
  ASSERT_EQ(parts.size(), 1u + 2u + 3u + 2u);
  EXPECT_EQ(parts[0].target, "transformer_blocks.0.norm1_context.linear.weight");
  EXPECT_EQ(parts[0].rows, -1);
  for (size_t i : {1u, 2u}) {
    EXPECT_EQ(parts[i].target, "transformer_blocks.1.norm1_context.linear.weight");
    EXPECT_EQ(parts[i].row_begin, i == 1 ? 2 : 0);  // (shift, scale) -> (scale, shift)
    EXPECT_EQ(parts[i].target_row, i == 1 ? 0 : 2);
  }
  EXPECT_EQ(parts[3].target, "transformer_blocks.1.attn.to_q.bias");
  EXPECT_EQ(parts[5].target, "transformer_blocks.1.attn.to_v.bias");
  EXPECT_EQ(parts[5].row_begin, 4);
  EXPECT_EQ(parts[6].target, "norm_out.linear.bias");
  EXPECT_CONTAINS(error_of([] { convert_sd3_keys("", {{"joint_blocks.0.x_block.attn2.qkv.weight", {7, 2}}}); }),
                  "InputError: tensor 'joint_blocks.0.x_block.attn2.qkv.weight' [7,2]: a fused q/k/v projection "
                  "needs a first dimension divisible by 3");
}

TEST(SingleFile, Sd3RefusalsAreOneLine) {
  const std::string file = kSingle + "/tiny-sd3.5-mmdit.safetensors";
  // No --base: no tokenizers anywhere.
  std::string e = error_of([&] { resolve_model(file); });
  EXPECT_CONTAINS(e, "InputError: '" + file + "' is a Stable Diffusion 3 single file, which holds no tokenizers; pass "
                     "--base DIR|org/name, a diffusers StableDiffusion3Pipeline");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // A base of another architecture: the file's blocks, dual attention and QK norm against its config.
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd3";
  e = error_of([&] { resolve_model(file, "", nullptr, o); });
  EXPECT_CONTAINS(e, "InputError: '" + file + "''s keys say num_layers 3, dual_attention_layers [0,1], qk_norm "
                     "\"rms_norm\", pos_embed_max_size 12 but --base '");
  EXPECT_CONTAINS(e, "'s transformer config has num_layers 1, dual_attention_layers [], qk_norm null, "
                     "pos_embed_max_size 96; give the base the file belongs to");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // A base of another family.
  o.base = kPipelines + "/tiny-flux-dev";
  EXPECT_CONTAINS(error_of([&] { resolve_model(file, "", nullptr, o); }),
                  "is a Stable Diffusion 3 checkpoint but --base");
  // CLIP-L from the file gets diffusers' torch.eye(hidden_size) projection, which only a square
  // text_projection takes: a base config with projection_dim 16 for a 32-wide CLIP-L is refused.
  SingleFileOptions clips;
  clips.base = kPipelines + "/tiny-sd3";
  const ModelDir md = resolve_model(kSingle + "/tiny-sd3-incl-clips.safetensors", "", nullptr, clips);
  Component c = md.at("text_encoder");
  c.config["projection_dim"] = 16;
  e = error_of([&] { load_component(c, at::TensorOptions().dtype(at::kFloat)); });
  EXPECT_CONTAINS(e, "InputError: component 'text_encoder': SD3's CLIP-L read from '");
  EXPECT_CONTAINS(e, "gets the identity as its text_projection (as diffusers gives it), which needs a "
                     "CLIPTextModelWithProjection config with projection_dim = hidden_size");
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(SingleFile, InspectReportsTheSd3Kind) {
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-sd3";
  const InspectReport report = inspect_model(kSingle + "/tiny-sd3-incl-clips.safetensors", "", "", o);
  ASSERT_TRUE(report.ok()) << report.error;
  const json j = report.to_json();
  EXPECT_EQ(j["single_file"]["kind"], "sd3");
  EXPECT_EQ(j["components"]["transformer"]["source"], "single file (model.diffusion_model.*, SD3 MMDiT)");
  // The identity text_projection is not the file's: the key check does not ask for it.
  EXPECT_TRUE(j["components"]["text_encoder"]["keys"]["ok"].get<bool>());
  EXPECT_TRUE(j["components"]["transformer"]["keys"]["ok"].get<bool>());
}

// ---- Chroma in Black Forest Labs' layout (chroma-unlocked-v*.safetensors).

TEST(SingleFile, ChromaBflFileIsTheDirectorysBitForBit) {
  const std::string file = kSingle + "/tiny-chroma-bfl.safetensors";
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-chroma";
  const ModelDir single = resolve_model(file, "", nullptr, o);
  ASSERT_TRUE(single.single_file);
  EXPECT_EQ(single.single_file->kind, "chroma");
  EXPECT_EQ(single.single_file->label, "Chroma (BFL FLUX.1 transformer file)");
  EXPECT_EQ(single.at("transformer").source, "single file (*, BFL FLUX.1)");
  const ModelDir dir = resolve_model(kPipelines + "/tiny-chroma");
  expect_component_is_the_directorys(single, dir, "transformer", file);
  LoadRequest r, d;
  r.model = file;
  r.base = o.base;
  d.model = kPipelines + "/tiny-chroma";
  EXPECT_EQ(pixels(r, 2), pixels(d, 2));
  const InspectReport report = inspect_model(file, "", "", o);
  ASSERT_TRUE(report.ok()) << report.error;
  EXPECT_EQ(report.to_json()["single_file"]["kind"], "chroma");
}

TEST(SingleFile, ChromaRefusalsAreOneLine) {
  const std::string file = kSingle + "/tiny-chroma-bfl.safetensors";
  std::string e = error_of([&] { resolve_model(file); });
  EXPECT_CONTAINS(e, "InputError: '" + file + "' is a Chroma single file, which holds no tokenizers; pass --base "
                     "DIR|org/name, a diffusers ChromaPipeline");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  SingleFileOptions o;
  o.base = kPipelines + "/tiny-chroma-alt";  // 2 + 2 blocks, 2 approximator layers; the file has 1 + 1, 1
  e = error_of([&] { resolve_model(file, "", nullptr, o); });
  EXPECT_CONTAINS(e, "'s keys say num_layers 1, num_single_layers 1, approximator_layers 1 but --base '");
  EXPECT_CONTAINS(e, "'s transformer config has num_layers 2, num_single_layers 2, approximator_layers 2; give the "
                     "base the file belongs to");
  o.base = kPipelines + "/tiny-flux-dev";
  EXPECT_CONTAINS(error_of([&] { resolve_model(file, "", nullptr, o); }), "is a Chroma checkpoint but --base");
  // Detected by the distilled guidance layer before FLUX.1's guidance_in decides dev or schnell.
  EXPECT_EQ(detect_dit_checkpoint({{"double_blocks.0.img_attn.norm.key_norm.scale", {128}},
                                   {"distilled_guidance_layer.in_proj.weight", {5120, 64}}},
                                  "c")
                ->kind,
            "chroma");
  // The approximator's keys as diffusers names them.
  const std::vector<TensorPart> parts =
      convert_flux_bfl_keys("", 8, {{"distilled_guidance_layer.layers.3.out_layer.bias", {4}},
                                    {"distilled_guidance_layer.norms.3.scale", {4}},
                                    {"distilled_guidance_layer.out_proj.weight", {4, 4}}});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].target, "distilled_guidance_layer.layers.3.linear_2.bias");
  EXPECT_EQ(parts[1].target, "distilled_guidance_layer.norms.3.weight");
  EXPECT_EQ(parts[2].target, "distilled_guidance_layer.out_proj.weight");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

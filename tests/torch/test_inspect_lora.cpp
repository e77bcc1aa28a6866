// `dpinfer inspect MODEL --lora FILE` and `dpinfer inspect LORA.safetensors`: the format, the
// layers per component, ranks and alphas of the committed LoRA fixtures on the tiny pipelines, a
// LoRA of another family refused with `dpinfer generate --lora`'s message, and the real binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/lora_inspect.h"
#include "dpinfer/util/strings.h"
#include "support/subprocess.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kPipelines = kData + "/pipelines/";

/// The report's component `name` of its only LoRA.
const LoraComponentReport& lora_component(const InspectReport& r, const std::string& name) {
  for (const LoraComponentReport& c : r.loras.at(0).components)
    if (c.name == name) return c;
  throw std::runtime_error("no LoRA component " + name);
}

InspectReport inspect_with(const std::string& pipeline, const std::string& lora, double scale = 1.0) {
  return inspect_model(kPipelines + pipeline, "", "", {}, {{kData + "/" + lora, scale}});
}

/// The number of down-factor keys (lora_A / lora_down) in `path` whose names start with `prefix`.
int64_t down_keys(const std::string& path, const std::string& prefix) {
  int64_t n = 0;
  const auto file = io::SafetensorsFile::open(path);  // kept: tensors() refers into it
  for (const io::TensorView& t : file->tensors())
    n += starts_with(t.name, prefix) && (ends_with(t.name, ".lora_A.weight") || ends_with(t.name, ".lora_down.weight"));
  return n;
}

TEST(InspectLora, OnAGgufFileTheTransformersLoraIsAppliedUnfused) {
  SingleFileOptions single_file;
  single_file.base = kPipelines + "tiny-flux-dev";
  const InspectReport r = inspect_model(kData + "/gguf/tiny-flux-dev-mixed.gguf", "", "", single_file,
                                        {{kData + "/loras-dit/flux-peft.safetensors", 1.0}});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(lora_component(r, "transformer").unfused);
  EXPECT_FALSE(lora_component(r, "text_encoder").unfused);  // merged, as diffusers' fuse_lora(components=...) can
  std::ostringstream text;
  r.loras.at(0).to_text(text);
  EXPECT_NE(text.str().find("  transformer: 25 of 30 LoRA-able layers, rank 2, alpha = rank (scale 1); applied unfused "
                            "beside its stored weights\n"),
            std::string::npos)
      << text.str();
  EXPECT_EQ(r.loras.at(0).to_json()["components"]["transformer"]["unfused"], true);
}

TEST(InspectLora, PeftOnSd1CountsEveryLayerOfTheFile) {
  const InspectReport r = inspect_with("tiny-sd1", "loras/sd1-peft.safetensors", 0.8);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.loras.size(), 1u);
  const LoraReport& l = r.loras[0];
  EXPECT_EQ(l.format, "diffusers / PEFT");
  EXPECT_EQ(l.scale, 0.8);
  const std::string file = kData + "/loras/sd1-peft.safetensors";
  EXPECT_EQ(lora_component(r, "unet").layers, down_keys(file, "unet."));
  EXPECT_EQ(lora_component(r, "text_encoder").layers, down_keys(file, "text_encoder."));
  EXPECT_EQ(lora_component(r, "unet").modules, 121);  // the tiny UNet's Linear and Conv2d weights
  EXPECT_EQ(lora_component(r, "unet").min_rank, 2);
  EXPECT_EQ(lora_component(r, "unet").max_rank, 2);
  EXPECT_EQ(lora_component(r, "unet").scaling, "alpha = rank (scale 1)");
  EXPECT_FALSE(l.has_alphas);
}

TEST(InspectLora, KohyaAndLoConOnSd1WithTheirAlphas) {
  const InspectReport kohya = inspect_with("tiny-sd1", "loras/sd1-kohya.safetensors");
  ASSERT_TRUE(kohya.ok()) << kohya.error;
  EXPECT_EQ(kohya.loras[0].format, "kohya / A1111");
  const std::string file = kData + "/loras/sd1-kohya.safetensors";
  EXPECT_EQ(lora_component(kohya, "unet").layers, down_keys(file, "lora_unet_"));
  EXPECT_EQ(lora_component(kohya, "text_encoder").layers, down_keys(file, "lora_te_"));
  EXPECT_EQ(lora_component(kohya, "unet").scaling, "alpha 2 (scale 0.5)");  // its .alpha tensors: 2 at rank 4
  EXPECT_TRUE(kohya.loras[0].has_alphas);
  const InspectReport locon = inspect_with("tiny-sd1", "loras/sd1-locon.safetensors");
  ASSERT_TRUE(locon.ok()) << locon.error;
  EXPECT_EQ(locon.loras[0].format, "kohya / A1111 with 3x3 convolutions (LoCon)");
  EXPECT_EQ(lora_component(locon, "unet").layers, down_keys(kData + "/loras/sd1-locon.safetensors", "lora_unet_"));
  EXPECT_EQ(lora_component(locon, "text_encoder").layers, 0);
}

TEST(InspectLora, DoraFilesAreReportedAsDora) {
  const InspectReport r = inspect_with("tiny-sd1", "loras-dora/sd1-dora.safetensors");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.loras[0].format, "diffusers / PEFT, DoRA (lora_magnitude_vector)");
  const std::string file = kData + "/loras-dora/sd1-dora.safetensors";
  EXPECT_EQ(lora_component(r, "unet").layers, down_keys(file, "unet."));
  EXPECT_EQ(lora_component(r, "unet").min_rank, 2);
  EXPECT_EQ(lora_component(r, "unet").max_rank, 3);
  // No alphas: lora_alpha is the first layer's rank, 2; DoRA rescales the rows after.
  EXPECT_EQ(lora_component(r, "unet").scaling, "alpha 2 (scale 0.6667-1); DoRA (magnitudes from its lora_magnitude_vector)");
  EXPECT_EQ(lora_component(r, "text_encoder").scaling,
            "alpha = rank (scale 1); DoRA (magnitudes from its lora_magnitude_vector)");
  // kohya's dora_scale: dropped with a warning, as diffusers drops it.
  const InspectReport kohya = inspect_with("tiny-sd1", "loras-dora/sd1-kohya-dora-scale.safetensors");
  ASSERT_TRUE(kohya.ok()) << kohya.error;
  EXPECT_EQ(kohya.loras[0].format,
            "kohya / A1111 with 3x3 convolutions (LoCon), DoRA scales (dora_scale) that diffusers 0.36 drops: merged as a "
            "plain LoRA");
  ASSERT_EQ(kohya.loras[0].ignored.size(), 1u);
  EXPECT_NE(kohya.loras[0].ignored[0].find("dora_scale"), std::string::npos) << kohya.loras[0].ignored[0];
  EXPECT_EQ(lora_component(kohya, "unet").scaling.find("DoRA"), std::string::npos);
}

TEST(InspectLora, SdxlKohyaReachesBothTextEncoders) {
  const InspectReport r = inspect_with("tiny-sdxl", "loras/sdxl-kohya.safetensors");
  ASSERT_TRUE(r.ok()) << r.error;
  const std::string file = kData + "/loras/sdxl-kohya.safetensors";
  EXPECT_EQ(lora_component(r, "text_encoder").layers, down_keys(file, "lora_te1_"));
  EXPECT_EQ(lora_component(r, "text_encoder_2").layers, down_keys(file, "lora_te2_"));
  EXPECT_EQ(lora_component(r, "unet").layers, down_keys(file, "lora_unet_"));
}

TEST(InspectLora, EachFluxFormatIsNamedWithWhatItDrops) {
  const InspectReport kohya = inspect_with("tiny-flux-dev", "loras-dit/flux-kohya.safetensors");
  ASSERT_TRUE(kohya.ok()) << kohya.error;
  EXPECT_EQ(kohya.loras[0].format, "kohya / ComfyUI FLUX.1 (BFL block names)");
  // BFL's fused qkv / linear1 become one layer per diffusers module (lora_flux_keys.h).
  EXPECT_EQ(lora_component(kohya, "transformer").layers, 20);
  EXPECT_EQ(lora_component(kohya, "transformer").min_rank, 3);
  EXPECT_EQ(lora_component(kohya, "transformer").max_rank, 4);
  EXPECT_EQ(lora_component(kohya, "text_encoder").layers, 5);
  EXPECT_EQ(kohya.loras[0].ignored.size(), 2u);  // the embedders / final layer, and lora_te1_
  const InspectReport xlabs = inspect_with("tiny-flux-dev", "loras-flux-formats/flux-xlabs.safetensors");
  ASSERT_TRUE(xlabs.ok()) << xlabs.error;
  EXPECT_EQ(xlabs.loras[0].format, "XLabs FLUX.1");
  // No alphas, ranks 2-4: get_peft_kwargs' lora_alpha is the first layer's rank.
  EXPECT_EQ(lora_component(xlabs, "transformer").scaling, "alpha 2 (scale 0.5-1)");
  const InspectReport mixture = inspect_with("tiny-flux-dev", "loras-flux-formats/flux-mixture.safetensors");
  ASSERT_TRUE(mixture.ok()) << mixture.error;
  EXPECT_EQ(mixture.loras[0].format, "FLUX.1 in diffusers' underscored names (lora_transformer_)");
  EXPECT_EQ(lora_component(mixture, "transformer").scaling, "alpha / rank folded into the factors by the converter");
  const InspectReport metadata = inspect_with("tiny-flux-dev", "loras-scaling/flux-metadata.safetensors");
  ASSERT_TRUE(metadata.ok()) << metadata.error;
  EXPECT_TRUE(metadata.loras[0].has_adapter_metadata);
  EXPECT_EQ(lora_component(metadata, "text_encoder").scaling, "alpha 3 (scale 1.5)");
}

TEST(InspectLora, QwenImageAndZImageOriginalNames) {
  for (const auto& [pipeline, lora] : {std::pair<std::string, std::string>{"tiny-qwen-image", "loras-dit/qwen-diffusion-model.safetensors"},
                                       {"tiny-z-image", "loras-dit/z-image-original.safetensors"}}) {
    const InspectReport r = inspect_with(pipeline, lora);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.loras[0].format, "Qwen-Image / Z-Image original names") << lora;
    EXPECT_EQ(lora_component(r, "transformer").layers, down_keys(kData + "/" + lora, "diffusion_model.")) << lora;
  }
}

TEST(InspectLora, ALoraOfAnotherFamilyFailsWithGeneratesMessage) {
  const InspectReport r = inspect_with("tiny-sd1", "loras/other-family.safetensors");
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.bad_input);
  EXPECT_EQ(r.error.rfind("--lora: '", 0), 0u) << r.error;
  EXPECT_NE(r.error.find("it is a LoRA for a transformer (DiT) model, not for a UNet one"), std::string::npos) << r.error;
  EXPECT_EQ(r.loras[0].error, r.error);
  EXPECT_NE(r.to_text().find("fails: the model loads, but a LoRA does not fit it"), std::string::npos);
  // The spelling SD 1.x reads that the file comes nearest to (lora_nearest_spelling.h), and how it differs.
  EXPECT_EQ(r.loras[0].nearest_spelling.rfind("diffusers / PEFT", 0), 0u) << r.loras[0].nearest_spelling;
  EXPECT_NE(r.loras[0].nearest_differs.find("which starts with none of unet., text_encoder."), std::string::npos)
      << r.loras[0].nearest_differs;
  EXPECT_NE(r.to_text().find("\n  nearest spelling: diffusers / PEFT"), std::string::npos) << r.to_text();
  EXPECT_EQ(r.to_json()["loras"][0]["nearest_spelling"]["spelling"], r.loras[0].nearest_spelling);
}

TEST(InspectLora, ALoraAloneIsDescribedByItsNames) {
  const LoraFileReport sdxl = describe_lora_file(kData + "/loras/sdxl-kohya.safetensors");
  EXPECT_NE(sdxl.names.families.at(0).find("SDXL's two text encoders' names"), std::string::npos);
  EXPECT_EQ(sdxl.names.components.at("text_encoder_2").layers, 30);
  EXPECT_TRUE(sdxl.names.has_alphas);
  const LoraFileReport flux = describe_lora_file(kData + "/loras-dit/flux-kohya.safetensors");
  EXPECT_EQ(flux.names.format, "kohya / ComfyUI FLUX.1 (BFL block names)");
  EXPECT_EQ(flux.names.families.at(0), "FLUX.1 / Chroma (BFL block names)");
  // ComfyUI's lora_down names are FLUX.1's and FLUX.2's alike; the factor shapes tell them apart (FLUX.2's linear1
  // up factor is 9 times the width, its MLP's input 6 times; FLUX.1's 7 and 4).
  const LoraFileReport flux2 = describe_lora_file(kData + "/loras-flux2/flux2-comfy.safetensors");
  EXPECT_EQ(flux2.names.families.at(0), "FLUX.2 (BFL block names)") << flux2.names.format;
  EXPECT_EQ(flux2.names.components.at("transformer").layers, 3);
  EXPECT_TRUE(describe_lora_file(kData + "/loras-scaling/flux-metadata.safetensors").has_adapter_metadata);
  EXPECT_TRUE(lora_file_report(kData + "/loras-dit/qwen-peft.safetensors"));
  EXPECT_FALSE(lora_file_report(kPipelines + "tiny-sd1/unet/diffusion_pytorch_model.safetensors"));
}

TEST(InspectLora, TheBinaryReportsLorasAndExitsTwoForOneThatDoesNotFit) {
  const std::string sd1 = kPipelines + "tiny-sd1";
  test::RunResult run = test::run({test::dpinfer_binary(), "inspect", sd1, "--lora",
                                   kData + "/loras/sd1-kohya.safetensors:0.5", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json j = json::parse(run.out);
  ASSERT_EQ(j["loras"].size(), 1u);
  EXPECT_EQ(j["loras"][0]["format"], "kohya / A1111");
  EXPECT_EQ(j["loras"][0]["scale"], 0.5);
  EXPECT_EQ(j["loras"][0]["components"]["unet"]["min_rank"], 4);
  EXPECT_EQ(j["loras"][0]["ok"], true);
  run = test::run({test::dpinfer_binary(), "inspect", sd1, "--lora", kData + "/loras/other-family.safetensors"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err.rfind("error: --lora: '", 0), 0u) << run.err;
  run = test::run({test::dpinfer_binary(), "inspect", kData + "/loras/sd1-kohya.safetensors"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("format: kohya / A1111 (by its key names)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("check it against a model: dpinfer inspect MODEL --lora"), std::string::npos) << run.out;
  run = test::run({test::dpinfer_binary(), "inspect", kData + "/loras/sd1-peft.safetensors", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(json::parse(run.out)["components"]["unet"]["layers"], 72);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// lora_format.h: which converter reads a LoRA's keys under a family's rules, and what names and
// shapes alone say (the cross-attention width tells SD 1.x, SD 2.x and SDXL UNet LoRAs apart).
#include <gtest/gtest.h>

#include "dpinfer/pipeline/loading/lora_format.h"
#include "dpinfer/pipeline/loading/lora_nearest_spelling.h"

using namespace dpinfer::pipeline;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::vector<LoraTensorKey> kohya_unet(int64_t width) {
  const std::string m = "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k";
  return {{m + ".lora_down.weight", {4, width}}, {m + ".lora_up.weight", {320, 4}}, {m + ".alpha", {}}};
}

TEST(LoraFormat, FollowsMapLoraKeysDispatch) {
  const std::vector<LoraTensorKey> peft = {{"unet.a.to_q.lora_A.weight", {2, 8}}, {"unet.a.to_q.lora_B.weight", {8, 2}}};
  EXPECT_EQ(lora_format(peft, stable_diffusion_lora_rules()), "diffusers / PEFT");
  EXPECT_EQ(lora_format(kohya_unet(768), stable_diffusion_lora_rules()), "kohya / A1111");
  // diffusers' pre-PEFT spellings, which its SD / SDXL loader maps to PEFT's (lora_keys.cpp, peft_spelling).
  const std::string old_diffusers =
      "diffusers before PEFT (lora_linear_layer or attention-processor names, which diffusers reads as PEFT's)";
  const std::vector<LoraTensorKey> linear_layer = {
      {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_linear_layer.down.weight", {2, 8}},
      {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_linear_layer.up.weight", {8, 2}}};
  EXPECT_EQ(lora_format(linear_layer, stable_diffusion_xl_lora_rules()), old_diffusers);
  const std::vector<LoraTensorKey> processor = {{"unet.a.attn1.processor.to_q_lora.down.weight", {2, 8}},
                                                {"unet.a.attn1.processor.to_q_lora.up.weight", {8, 2}}};
  EXPECT_EQ(lora_format(processor, stable_diffusion_lora_rules()), old_diffusers);
  std::vector<LoraTensorKey> locon = kohya_unet(768);
  locon.push_back({"lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", {4, 320, 3, 3}});
  EXPECT_EQ(lora_format(locon, stable_diffusion_lora_rules()), "kohya / A1111 with 3x3 convolutions (LoCon)");
  const std::vector<LoraTensorKey> bfl = {{"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", {4, 32}},
                                          {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", {96, 4}}};
  EXPECT_EQ(lora_format(bfl, flux_lora_rules()), "kohya / ComfyUI FLUX.1 (BFL block names)");
  EXPECT_EQ(lora_format(bfl, stable_diffusion_lora_rules()), "kohya / ComfyUI FLUX.1 (BFL block names)");
  const std::vector<LoraTensorKey> xlabs = {{"double_blocks.0.processor.qkv_lora1.down.weight", {4, 32}},
                                            {"double_blocks.0.processor.qkv_lora1.up.weight", {96, 4}}};
  EXPECT_EQ(lora_format(xlabs, flux_lora_rules()), "XLabs FLUX.1");
  // FLUX.2's BFL names (ai-toolkit's lora_A), with its model and by the names alone (the shared modulations and
  // lora_A factors in BFL's names are FLUX.2's: FLUX.1's loader reads nothing from those).
  const std::vector<LoraTensorKey> flux2 = {{"diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight", {4, 32}},
                                            {"diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight", {96, 4}}};
  EXPECT_EQ(lora_format(flux2, flux2_lora_rules()), "ai-toolkit / ComfyUI FLUX.2 (BFL block names)");
  EXPECT_EQ(describe_lora_names(flux2).families, std::vector<std::string>{"FLUX.2 (BFL block names)"});
  EXPECT_EQ(nearest_lora_spelling(flux2, flux2_lora_rules()).spelling.rfind("ai-toolkit / ComfyUI FLUX.2", 0), 0u);
  const std::vector<LoraTensorKey> qwen = {{"diffusion_model.img_in.lora_down.weight", {4, 16}},
                                           {"diffusion_model.img_in.lora_up.weight", {48, 4}}};
  EXPECT_EQ(lora_format(qwen, qwen_image_lora_rules()), "Qwen-Image / Z-Image original names");
  const std::vector<LoraTensorKey> loha = {{"lora_unet_x.hada_w1_a", {4, 8}}};
  EXPECT_EQ(lora_format(loha, stable_diffusion_lora_rules()), "LyCORIS LoHa (dpinfer does not read it)");
}

TEST(LoraFormat, DoraFilesSayWhatBecomesOfTheirMagnitudes) {
  std::vector<LoraTensorKey> peft = {{"unet.mid_block.attentions.0.proj_in.lora_A.weight", {2, 8}},
                                     {"unet.mid_block.attentions.0.proj_in.lora_B.weight", {8, 2}},
                                     {"unet.mid_block.attentions.0.proj_in.lora_magnitude_vector", {8}}};
  EXPECT_EQ(lora_format(peft, stable_diffusion_lora_rules()), "diffusers / PEFT, DoRA (lora_magnitude_vector)");
  std::vector<LoraTensorKey> kohya = kohya_unet(768);
  kohya.push_back({kohya.front().key.substr(0, kohya.front().key.find('.')) + ".dora_scale", {320, 1}});
  EXPECT_EQ(lora_format(kohya, stable_diffusion_lora_rules()),
            "kohya / A1111, DoRA scales (dora_scale) that diffusers 0.36 drops: merged as a plain LoRA");
  // The names still tell the family (the dora_scale keys aside).
  EXPECT_EQ(describe_lora_names(kohya).families.at(0), "SD 1.x (cross-attention width 768)");
}

TEST(LoraFormat, CrossAttentionWidthNamesTheUnetFamily) {
  EXPECT_EQ(describe_lora_names(kohya_unet(768)).families.at(0), "SD 1.x (cross-attention width 768)");
  EXPECT_EQ(describe_lora_names(kohya_unet(1024)).families.at(0), "SD 2.x (cross-attention width 1024)");
  EXPECT_EQ(describe_lora_names(kohya_unet(2048)).families.at(0).rfind("SDXL (", 0), 0u);
  const LoraNameFacts facts = describe_lora_names(kohya_unet(768));
  EXPECT_EQ(facts.components.at("unet").layers, 1);
  EXPECT_EQ(facts.components.at("unet").min_rank, 4);
  EXPECT_TRUE(facts.has_alphas);
}

TEST(LoraFormat, AModelsUpAndDownWeightsAreNoLoraLayers) {
  EXPECT_TRUE(describe_lora_names({{"decoder.up.weight", {4, 8}}, {"encoder.down.weight", {4, 8}}}).components.empty());
  EXPECT_EQ(describe_lora_names({{"double_blocks.0.processor.qkv_lora1.down.weight", {4, 32}}}).components.at("transformer").layers, 1);
}

TEST(LoraFormat, RankText) {
  EXPECT_EQ(rank_text(16, 16), "rank 16");
  EXPECT_EQ(rank_text(4, 32), "ranks 4-32");
}

// lora_nearest_spelling.h: for a refused file, the spelling the family reads that its keys come nearest to, and
// the first key that differs from it (what `dpinfer inspect MODEL --lora FILE` prints under the error).
TEST(LoraNearestSpelling, NamesTheSpellingAndTheFirstKeyThatDiffers) {
  const std::string q = "text_encoder.text_model.encoder.layers.0.self_attn.q_proj";
  // A text encoder in .lora.down names (refused, as diffusers 0.36 fails on it): PEFT's prefix, not its suffix.
  const LoraNearestSpelling lora_dot = nearest_lora_spelling(
      {{q + ".lora.down.weight", {2, 8}}, {q + ".lora.up.weight", {8, 2}}}, flux_lora_rules());
  EXPECT_EQ(lora_dot.spelling, "diffusers / PEFT (<component>.<module>.lora_A.weight / .lora_B.weight)");
  EXPECT_EQ(lora_dot.differs.rfind("2 of its 2 keys are not, e.g. '" + q + ".lora.down.weight', which ends with none of "
                                   ".lora_A.weight, .lora_B.weight, .alpha, .lora_magnitude_vector",
                                   0),
            0u) << lora_dot.differs;
  // A kohya UNet file on SD3 (whose loader converts nothing): PEFT's suffixes are not kohya's; the prefix neither.
  const LoraNearestSpelling kohya = nearest_lora_spelling(kohya_unet(768), stable_diffusion_3_lora_rules());
  EXPECT_EQ(kohya.spelling.rfind("diffusers / PEFT", 0), 0u) << kohya.spelling;
  EXPECT_NE(kohya.differs.find("starts with none of transformer., text_encoder., text_encoder_2."), std::string::npos)
      << kohya.differs;
  // The same file on SD 1.x is in a spelling it reads: every key is so, the error says what else is wrong.
  const LoraNearestSpelling sd1 = nearest_lora_spelling(kohya_unet(768), stable_diffusion_lora_rules());
  EXPECT_EQ(sd1.spelling.rfind("kohya / A1111 / LoCon", 0), 0u) << sd1.spelling;
  EXPECT_EQ(sd1.differs, "every key is spelled so (the error says what else is wrong)");
  // BFL's kohya names with one PEFT factor among them on FLUX.1: two whole BFL keys outweigh it.
  const LoraNearestSpelling bfl = nearest_lora_spelling(
      {{"lora_unet_double_blocks_0_img_attn_proj.lora_down.weight", {2, 8}},
       {"lora_unet_double_blocks_0_img_attn_proj.lora_up.weight", {8, 2}},
       {"lora_unet_double_blocks_0_img_attn_qkv.lora_A.weight", {2, 8}}},
      flux_lora_rules());
  EXPECT_EQ(bfl.spelling.rfind("kohya / ComfyUI FLUX.1 in BFL's block names", 0), 0u) << bfl.spelling;
  EXPECT_EQ(bfl.differs.rfind("1 of its 3 keys are not, e.g. 'lora_unet_double_blocks_0_img_attn_qkv.lora_A.weight'", 0),
            0u) << bfl.differs;
  EXPECT_TRUE(nearest_lora_spelling({}, flux_lora_rules()).spelling.empty());
  LoraKeyRules no_components = stable_diffusion_lora_rules();
  no_components.components.clear();  // a loader that takes LoRAs nowhere
  EXPECT_TRUE(nearest_lora_spelling(kohya_unet(768), no_components).spelling.empty());
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

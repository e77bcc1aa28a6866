// The LoRA key conversion (pipeline/loading/lora_keys.h) on synthetic key lists: every format
// it reads, the original (SGM) UNet block names, and each refusal in one line.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/loading/lora_keys.h"
#include "dpinfer/pipeline/loading/lora_sgm_order.h"
#include "dpinfer/pipeline/loading/lora_component_spellings.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using pipeline::LoraModuleTable;
using pipeline::LoraTensorKey;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

// An SDXL-like UNet with layers_per_block 2: down block 1 holds attentions, up block 0 too.
const LoraModuleTable kModules = {
    {"unet",
     {{"down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q", {8, 4}},
      {"down_blocks.0.resnets.1.conv1", {4, 4, 3, 3}},
      {"down_blocks.0.downsamplers.0.conv", {4, 4, 3, 3}},
      {"mid_block.attentions.0.proj_in", {8, 8}},
      {"mid_block.resnets.1.time_emb_proj", {8, 16}},
      {"up_blocks.0.attentions.2.proj_out", {8, 8}},
      {"up_blocks.0.resnets.2.conv_shortcut", {8, 12, 1, 1}},
      {"up_blocks.1.upsamplers.0.conv", {4, 4, 3, 3}}}},
    {"text_encoder", {{"text_model.encoder.layers.0.self_attn.q_proj", {6, 6}},
                      {"text_model.encoder.layers.0.self_attn.out_proj", {6, 6}}}},
    {"text_encoder_2", {{"text_model.encoder.layers.0.mlp.fc1", {10, 6}}}}};

const pipeline::LoraModelFacts kFacts{"Stable Diffusion XL", 2, pipeline::stable_diffusion_xl_lora_rules()};

nlohmann::json json_of(const char* text) { return nlohmann::json::parse(text); }

std::vector<LoraTensorKey> kohya(const std::string& name, std::vector<int64_t> down, std::vector<int64_t> up) {
  return {{name + ".lora_down.weight", down}, {name + ".lora_up.weight", up}, {name + ".alpha", {}}};
}

std::string refusal(const std::vector<LoraTensorKey>& keys) {
  try {
    pipeline::map_lora_keys(keys, kModules, kFacts, "x.safetensors");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LoraKeys, KohyaOriginalBlockNamesMapAsDiffusersDoes) {
  std::vector<LoraTensorKey> keys;
  const auto add = [&](const std::vector<LoraTensorKey>& k) { keys.insert(keys.end(), k.begin(), k.end()); };
  // input block 5 = down block (5-1)/3 = 1, layer (5-1)%3 = 1; part 1 the attention
  add(kohya("lora_unet_input_blocks_5_1_transformer_blocks_0_attn1_to_q", {2, 4}, {8, 2}));
  add(kohya("lora_unet_input_blocks_2_0_in_layers_2", {2, 4, 3, 3}, {4, 2, 1, 1}));  // down 0 resnet 1 conv1
  add(kohya("lora_unet_input_blocks_3_0_op", {2, 4, 3, 3}, {4, 2, 1, 1}));           // down 0 downsampler
  add(kohya("lora_unet_middle_block_1_proj_in", {2, 8}, {8, 2}));
  add(kohya("lora_unet_middle_block_2_emb_layers_1", {2, 16}, {8, 2}));
  add(kohya("lora_unet_output_blocks_2_1_proj_out", {2, 8}, {8, 2}));                  // up 0 attention 2
  add(kohya("lora_unet_output_blocks_2_0_skip_connection", {2, 12, 1, 1}, {8, 2, 1, 1}));
  add(kohya("lora_unet_output_blocks_5_1_conv", {2, 4, 3, 3}, {4, 2, 1, 1}));         // up 1 upsampler, no attention
  add(kohya("lora_te1_text_model_encoder_layers_0_self_attn_q_proj", {2, 6}, {6, 2}));
  add(kohya("lora_te1_text_model_encoder_layers_0_self_attn_out_proj", {2, 6}, {6, 2}));
  add(kohya("lora_te2_text_model_encoder_layers_0_mlp_fc1", {2, 6}, {10, 2}));
  const auto layers = pipeline::map_lora_keys(keys, kModules, kFacts, "x.safetensors");
  ASSERT_EQ(layers.size(), 11u);
  std::set<std::string> got;
  for (const auto& l : layers) {
    got.insert(l.component + ":" + l.module);
    EXPECT_EQ(l.rank, 2);
    EXPECT_TRUE(l.alpha_key.has_value());
    // diffusers files the alphas of attention projections (UNet to_q, CLIP q_proj) under names that
    // reach no module; proj_in's, fc1's, the convolutions' reach theirs.
    const bool projection = l.module == "down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q" ||
                            l.module == "text_model.encoder.layers.0.self_attn.q_proj" ||
                            l.module == "text_model.encoder.layers.0.self_attn.out_proj";
    EXPECT_EQ(l.alpha_reaches_no_module, projection) << l.module;
  }
  for (const auto& [component, table] : kModules)
    for (const auto& [module, shape] : table) EXPECT_TRUE(got.count(component + ":" + module)) << module;
}

// StableDiffusionLoraLoaderMixin does not map the original block names (only SDXL's loader does): refused on SD 1.x.
TEST(LoraKeys, KohyaOriginalBlockNamesAreRefusedOnSd1AsDiffusersFailsThere) {
  const pipeline::LoraModelFacts sd1{"Stable Diffusion", 2, pipeline::stable_diffusion_lora_rules()};
  std::string why;
  try {
    pipeline::map_lora_keys(kohya("lora_unet_middle_block_1_proj_in", {2, 8}, {8, 2}), kModules, sd1, "x.safetensors");
  } catch (const InputError& e) {
    why = e.what();
  }
  EXPECT_NE(why.find("'x.safetensors': kohya UNet key 'lora_unet_middle_block_1_proj_in.lora_down.weight' is in the original (SGM) "
                     "block names, which diffusers 0.36 maps for SDXL only"),
            std::string::npos) << why;
  EXPECT_EQ(pipeline::map_lora_keys(kohya("lora_unet_mid_block_attentions_0_proj_in", {2, 8}, {8, 2}), kModules, sd1,
                                    "x.safetensors")
                .size(),
            1u);
}

TEST(LoraKeys, PythonSetsOfBlockNumbersIterateAsCPythonsDo) {
  // Each expected order is list(s) after s.add(x) for x in the input, in the fixture venv's CPython 3.11.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 5, 7, 8}, {8, 4, 5, 7}},            // SDXL's attention input blocks: 8 sits in slot 0 of 8
      {{10, 1}, {1, 10}},                      // file order ("..._10_" < "..._1_"), numeric set order
      {{10, 11, 1, 2}, {2, 1, 10, 11}},        // 2 probes slots 2, 3, then (5 * 3 + 1) & 7 = 0
      {{8, 1, 2, 3, 4}, {1, 2, 3, 4, 8}},      // the fifth key resizes the table to 32 slots
      {{0, 8, 16, 24}, {0, 8, 16, 24}},
      {{1, 9, 17, 25, 33, 41}, {1, 33, 9, 41, 17, 25}},
      {{4, 5, 7, 8, 4, 8}, {8, 4, 5, 7}}};     // a number already there adds nothing
  for (const auto& [added, want] : cases) EXPECT_EQ(pipeline::python_int_set_order(added), want);
}

TEST(LoraKeys, KohyaOriginalBlockNamesComeInTheOrderSdxlsLoaderGivesThem) {
  // SDXL's attention blocks, input 4, 5, 7, 8: _maybe_map_sgm_blocks_to_diffusers lists the text keys first,
  // then input blocks 8, 4, 5, 7 (a Python set's order), the middle block, output blocks 8, 1 ({1, 8}); each
  // block's keys in the file's order. That order decides the first layer's rank (lora_alpha without alphas).
  const LoraModuleTable modules = {
      {"unet",
       {{"down_blocks.1.attentions.0.proj_in", {8, 8}},
        {"down_blocks.1.attentions.1.proj_in", {8, 8}},
        {"down_blocks.2.attentions.0.proj_in", {8, 8}},
        {"down_blocks.2.attentions.1.proj_in", {8, 8}},
        {"down_blocks.2.attentions.1.proj_out", {8, 8}},
        {"mid_block.attentions.0.proj_in", {8, 8}},
        {"up_blocks.0.attentions.1.proj_out", {8, 8}},
        {"up_blocks.2.resnets.2.time_emb_proj", {8, 16}}}},
      {"text_encoder", {{"text_model.encoder.layers.0.self_attn.out_proj", {6, 6}}}}};
  std::vector<LoraTensorKey> keys;
  for (const char* name : {"lora_unet_input_blocks_4_1_proj_in", "lora_unet_input_blocks_5_1_proj_in",
                           "lora_unet_input_blocks_7_1_proj_in", "lora_unet_input_blocks_8_1_proj_in",
                           "lora_unet_input_blocks_8_1_proj_out", "lora_unet_middle_block_1_proj_in",
                           "lora_unet_output_blocks_1_1_proj_out"})
    for (const auto& k : kohya(name, {2, 8}, {8, 2})) keys.push_back(k);
  for (const auto& k : kohya("lora_unet_output_blocks_8_0_emb_layers_1", {2, 16}, {8, 2})) keys.push_back(k);
  for (const auto& k : kohya("lora_te1_text_model_encoder_layers_0_self_attn_out_proj", {2, 6}, {6, 2})) keys.push_back(k);
  std::vector<std::string> got;
  for (const auto& l : pipeline::map_lora_keys(keys, modules, kFacts, "x.safetensors")) got.push_back(l.module);
  EXPECT_EQ(got, (std::vector<std::string>{
                     "text_model.encoder.layers.0.self_attn.out_proj", "down_blocks.2.attentions.1.proj_in",
                     "down_blocks.2.attentions.1.proj_out", "down_blocks.1.attentions.0.proj_in",
                     "down_blocks.1.attentions.1.proj_in", "down_blocks.2.attentions.0.proj_in",
                     "mid_block.attentions.0.proj_in", "up_blocks.2.resnets.2.time_emb_proj",
                     "up_blocks.0.attentions.1.proj_out"}));
  // A file in diffusers' block names keeps the file's order.
  keys.clear();
  for (const char* name : {"lora_unet_down_blocks_1_attentions_0_proj_in", "lora_unet_down_blocks_2_attentions_1_proj_in"})
    for (const auto& k : kohya(name, {2, 8}, {8, 2})) keys.push_back(k);
  got.clear();
  for (const auto& l : pipeline::map_lora_keys(keys, modules, kFacts, "x.safetensors")) got.push_back(l.module);
  EXPECT_EQ(got, (std::vector<std::string>{"down_blocks.1.attentions.0.proj_in", "down_blocks.2.attentions.1.proj_in"}));
}

TEST(LoraKeys, OriginalBlockNamesBesideDiffusersOnesAreDroppedAsDiffusersDropsThem) {
  std::vector<LoraTensorKey> keys;
  for (const auto& k : kohya("lora_unet_input_blocks_5_1_transformer_blocks_0_attn1_to_q", {2, 4}, {8, 2}))
    keys.push_back(k);
  for (const auto& k : kohya("lora_unet_mid_block_attentions_0_proj_in", {2, 8}, {8, 2})) keys.push_back(k);
  for (const auto& k : kohya("lora_te1_text_model_encoder_layers_0_self_attn_out_proj", {2, 6}, {6, 2})) keys.push_back(k);
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, kModules, kFacts, "x.safetensors", &ignored);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].module, "text_model.encoder.layers.0.self_attn.out_proj");
  EXPECT_EQ(layers[1].module, "mid_block.attentions.0.proj_in");
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("'lora_unet_input_blocks_5_1_transformer_blocks_0_attn1_to_q.alpha'"), std::string::npos)
      << ignored[0];
  EXPECT_NE(ignored[0].find("drops from a file that also has layers in its own block names"), std::string::npos)
      << ignored[0];
}

TEST(LoraKeys, PeftAndKohyaDiffusersNamesMap) {
  const auto layers = pipeline::map_lora_keys(
      {{"unet.mid_block.attentions.0.proj_in.lora.down.weight", {3, 8}},
       {"unet.mid_block.attentions.0.proj_in.lora.up.weight", {8, 3}},
       {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight", {1, 6}},
       {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight", {6, 1}},
       {"lora_unet_down_blocks_0_resnets_1_conv1.lora_down.weight", {2, 4, 3, 3}},
       {"lora_unet_down_blocks_0_resnets_1_conv1.lora_up.weight", {4, 2, 1, 1}}},
      kModules, kFacts, "x.safetensors");
  ASSERT_EQ(layers.size(), 3u);
  for (const auto& l : layers) EXPECT_FALSE(l.alpha_key.has_value());
}

// A text encoder's spellings as _load_lora_into_text_encoder reads them (lora_component_spellings.h): it guesses
// the spelling of the whole encoder, fails where it cannot, and leaves the keys outside the guess unread.
TEST(LoraKeys, TextEncoderSpellingsDiffusersCannotLoadAreRefusedInOneLine) {
  const std::string q = "text_encoder.text_model.encoder.layers.0.self_attn.q_proj";
  const std::string fc1 = "text_encoder.text_model.encoder.layers.0.mlp.fc1";
  const std::string lora_dot = refusal({{q + ".lora.down.weight", {1, 6}}, {q + ".lora.up.weight", {6, 1}}});
  EXPECT_NE(lora_dot.find("'x.safetensors': its text_encoder layers (key '" + q + ".lora.down.weight') are in the "
                          ".lora.down / .lora.up spelling"),
            std::string::npos) << lora_dot;
  EXPECT_NE(lora_dot.find("Could not automatically infer state dict type"), std::string::npos) << lora_dot;
  // PEFT's names with no q/k/v/out_proj layer: PEFT_TO_DIFFUSERS renames none, so the second guess fails.
  const std::string mlp = refusal({{fc1 + ".lora_A.weight", {1, 6}}, {fc1 + ".lora_B.weight", {10, 1}}});
  EXPECT_NE(mlp.find("in PEFT's spelling with no q_proj/k_proj/v_proj/out_proj layer"), std::string::npos) << mlp;
  const std::string mixed = refusal({{q + ".lora_A.weight", {1, 6}}, {q + ".lora_B.weight", {6, 1}},
                                     {fc1 + ".lora.down.weight", {1, 6}}, {fc1 + ".lora.up.weight", {10, 1}}});
  EXPECT_NE(mixed.find("its text_encoder layers mix spellings (key '" + fc1 + ".lora.down.weight' beside '" + q +
                       ".lora_A.weight')"),
            std::string::npos) << mixed;
  EXPECT_EQ(mixed.find('\n'), std::string::npos);
  // What diffusers reads: PEFT with an attention layer, lora_linear_layer alone (the MLP too), and the old patched
  // attention beside PEFT names (its table leaves lora_A as it is).
  EXPECT_EQ(pipeline::diffusers_text_encoder_respelling({"a.mlp.fc1.lora_linear_layer.down.weight"}),
            std::vector<std::string>{"a.mlp.fc1.lora_A.weight"});
  EXPECT_EQ(pipeline::diffusers_text_encoder_respelling(
                {"a.self_attn.to_out_lora.up.weight", "a.self_attn.k_proj.lora_A.weight", "a.mlp.fc1.lora_A.weight"}),
            (std::vector<std::string>{"a.self_attn.out_proj.lora_B.weight", "a.self_attn.k_proj.lora_A.weight",
                                      "a.mlp.fc1.lora_A.weight"}));
  EXPECT_TRUE(pipeline::diffusers_text_encoder_respelling({"a.mlp.fc1.lora_A.weight"}).empty());
  EXPECT_EQ(refusal({{q + ".lora_A.weight", {1, 6}}, {q + ".lora_B.weight", {6, 1}}}), "(accepted)");
}

// StableDiffusion(XL)LoraLoaderMixin / SD3LoraLoaderMixin.load_lora_weights: "Invalid LoRA checkpoint." unless every key
// has "lora" in it, so an ".alpha" beside diffusers' names fails there (FLUX.1's loader pops it as a network alpha).
TEST(LoraKeys, AnAlphaBesideDiffusersNamesIsRefusedWhereDiffusersFails) {
  const std::vector<LoraTensorKey> keys = {{"unet.mid_block.attentions.0.proj_in.lora_A.weight", {2, 8}},
                                           {"unet.mid_block.attentions.0.proj_in.lora_B.weight", {8, 2}},
                                           {"unet.mid_block.attentions.0.proj_in.alpha", {}}};
  const std::string why = refusal(keys);
  EXPECT_NE(why.find("'x.safetensors': alpha 'unet.mid_block.attentions.0.proj_in.alpha' beside diffusers' names, on "
                     "which diffusers fails for a Stable Diffusion XL LoRA (\"Invalid LoRA checkpoint.\""),
            std::string::npos) << why;
  EXPECT_FALSE(pipeline::flux_lora_rules().every_key_names_lora);
  EXPECT_FALSE(pipeline::chroma_lora_rules().every_key_names_lora);
  EXPECT_TRUE(pipeline::stable_diffusion_3_lora_rules().every_key_names_lora);
}

// A kohya text encoder goes through _convert_text_encoder_lora_key, then the same respellings: its q/k/v layers are
// read only beside an out_proj layer (the "to_out_lora" key), and without that or an MLP layer it fails.
TEST(LoraKeys, KohyaTextEncoderQkvWithoutOutProjIsRefusedAsDiffusersDropsIt) {
  const auto why = [](const std::vector<LoraTensorKey>& keys) {
    try {
      pipeline::check_kohya_text_encoder_spellings(keys, "x.safetensors");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string layer = "lora_te_text_model_encoder_layers_0_";
  const auto q = kohya(layer + "self_attn_q_proj", {2, 6}, {6, 2});
  const auto out = kohya(layer + "self_attn_out_proj", {2, 6}, {6, 2});
  const auto fc1 = kohya(layer + "mlp_fc1", {2, 6}, {10, 2});
  const auto join = [](std::vector<LoraTensorKey> a, const std::vector<LoraTensorKey>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_NE(why(q).find("its kohya text_encoder layers (key '" + layer + "self_attn_q_proj.lora_down.weight') have "
                        "neither an out_proj nor an MLP layer"),
            std::string::npos) << why(q);
  EXPECT_NE(why(join(q, fc1)).find("its kohya text_encoder layer '" + layer + "self_attn_q_proj.lora_down.weight' is "
                                   "one diffusers 0.36 drops"),
            std::string::npos) << why(join(q, fc1));
  EXPECT_EQ(why(join(join(q, out), fc1)), "(accepted)");
  EXPECT_EQ(why(fc1), "(accepted)");
  // lora_te2_ is the second encoder, checked on its own.
  EXPECT_NE(why(join(join(q, out), kohya("lora_te2_text_model_encoder_layers_0_self_attn_k_proj", {2, 6}, {6, 2})))
                .find("its kohya text_encoder_2 layers"),
            std::string::npos);
}

TEST(LoraKeys, RefusalsNameTheFileAndTheProblemInOneLine) {
  const std::string shape = refusal(kohya("lora_unet_middle_block_1_proj_in", {2, 7}, {8, 2}));
  EXPECT_NE(shape.find("x.safetensors"), std::string::npos) << shape;
  EXPECT_NE(shape.find("do not fit unet.mid_block.attentions.0.proj_in.weight [8, 8]"), std::string::npos) << shape;

  auto partial = kohya("lora_unet_middle_block_1_proj_in", {2, 8}, {8, 2});
  for (const auto& k : kohya("lora_unet_input_blocks_7_1_proj_in", {2, 8}, {8, 2})) partial.push_back(k);
  const std::string some = refusal(partial);
  EXPECT_NE(some.find("only 1 of its 2 LoRA layers match"), std::string::npos) << some;
  EXPECT_NE(some.find("lora_unet_input_blocks_7_1_proj_in"), std::string::npos) << some;

  const std::string none = refusal({{"transformer.blocks.0.attn.to_q.lora_A.weight", {2, 4}},
                                    {"transformer.blocks.0.attn.to_q.lora_B.weight", {4, 2}}});
  EXPECT_NE(none.find("none of its 1 LoRA layer(s) match"), std::string::npos) << none;
  EXPECT_NE(none.find("transformer (DiT)"), std::string::npos) << none;

  EXPECT_NE(refusal({{"lora_unet_x.hada_w1_a", {2, 2}}}).find("LyCORIS LoHa"), std::string::npos);
  EXPECT_NE(refusal({{"model.diffusion_model.x.weight", {2, 2}}}).find("is it a LoRA?"), std::string::npos);
  // A file of no tensors (fuzz_lora_keys found the header "{}" reading the first of no unmatched layers).
  EXPECT_NE(refusal({}).find("x.safetensors': no tensors"), std::string::npos) << refusal({});
  EXPECT_NE(refusal({{"lora_unet_middle_block_1_proj_in.lora_down.weight", {2, 8}}}).find("not its up (B) weight"),
            std::string::npos);
  // An alpha alone (no factors of its layer) is named as such: the DoRA check before it read an empty magnitude.
  auto alpha_alone = kohya("lora_unet_middle_block_1_proj_in", {2, 8}, {8, 2});
  alpha_alone.push_back({"lora_unet_nothing_here.alpha", {}});
  const std::string alone = refusal(alpha_alone);
  EXPECT_NE(alone.find("layer 'lora_unet_nothing_here' has an alpha ('lora_unet_nothing_here.alpha') but no down / up "
                       "weights"),
            std::string::npos)
      << alone;
  for (const std::string& why : {shape, some, none}) EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

// ---- DoRA (make_dora_lora_fixtures.py has the merges; these are the keys) ----

std::vector<LoraTensorKey> peft_dora(const std::string& name, std::vector<int64_t> down, std::vector<int64_t> up,
                                     std::vector<int64_t> magnitude) {
  return {{name + ".lora_A.weight", down}, {name + ".lora_B.weight", up}, {name + ".lora_magnitude_vector", magnitude}};
}

TEST(DoraLoraKeys, PeftMagnitudesComeWithTheirLayers) {
  std::vector<LoraTensorKey> keys = peft_dora("unet.down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q", {2, 4},
                                              {8, 2}, {8});
  for (const auto& k : peft_dora("unet.down_blocks.0.resnets.1.conv1", {2, 4, 3, 3}, {4, 2, 1, 1}, {1, 4, 1, 1}))
    keys.push_back(k);
  // A plain component beside a DoRA one: use_dora is the component's.
  keys.push_back({"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight", {2, 6}});
  keys.push_back({"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight", {6, 2}});
  const auto layers = pipeline::map_lora_keys(keys, kModules, kFacts, "x.safetensors");
  ASSERT_EQ(layers.size(), 3u);
  std::map<std::string, std::optional<std::string>> magnitude;
  for (const auto& l : layers) magnitude[l.module] = l.magnitude_key;
  EXPECT_EQ(magnitude.at("down_blocks.0.resnets.1.conv1"), "unet.down_blocks.0.resnets.1.conv1.lora_magnitude_vector");
  EXPECT_EQ(magnitude.at("down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q"),
            "unet.down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q.lora_magnitude_vector");
  EXPECT_FALSE(magnitude.at("text_model.encoder.layers.0.self_attn.q_proj"));
}

TEST(DoraLoraKeys, KohyaDoraScalesAreDroppedAsDiffusersDropsThem) {
  auto keys = kohya("lora_unet_middle_block_1_proj_in", {2, 8}, {8, 2});
  keys.push_back({"lora_unet_middle_block_1_proj_in.dora_scale", {8, 1}});
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, kModules, kFacts, "x.safetensors", &ignored);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_FALSE(layers[0].magnitude_key);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("'lora_unet_middle_block_1_proj_in.dora_scale'"), std::string::npos) << ignored[0];
  EXPECT_NE(ignored[0].find("plain LoRA layers"), std::string::npos) << ignored[0];
}

TEST(DoraLoraKeys, WhatDiffusersCannotLoadOrDpinferDoesNotEmulateIsRefusedInOneLine) {
  const std::string to_q = "unet.down_blocks.1.attentions.1.transformer_blocks.0.attn1.to_q";
  std::string why = refusal(peft_dora(to_q, {2, 4}, {8, 2}, {1, 8}));
  EXPECT_NE(why.find("x.safetensors': DoRA magnitude 'unet.down_blocks.1."), std::string::npos) << why;
  EXPECT_NE(why.find("has shape [1, 8], but " + to_q + ".weight [8, 4] takes [8]"), std::string::npos) << why;
  why = refusal(peft_dora("unet.down_blocks.0.resnets.1.conv1", {2, 4, 3, 3}, {4, 2, 1, 1}, {4}));
  EXPECT_NE(why.find("takes [1, 4, 1, 1]"), std::string::npos) << why;
  why = refusal({{to_q + ".lora_magnitude_vector", {8}}});
  EXPECT_NE(why.find("has a DoRA magnitude"), std::string::npos) << why;
  EXPECT_NE(why.find("no lora_A / lora_B weights"), std::string::npos) << why;
  auto mixed = peft_dora(to_q, {2, 4}, {8, 2}, {8});
  mixed.push_back({"unet.mid_block.attentions.0.proj_in.lora_A.weight", {2, 8}});
  mixed.push_back({"unet.mid_block.attentions.0.proj_in.lora_B.weight", {8, 2}});
  why = refusal(mixed);
  EXPECT_NE(why.find("is a DoRA layer"), std::string::npos) << why;
  EXPECT_NE(why.find("'mid_block.attentions.0.proj_in' has no lora_magnitude_vector"), std::string::npos) << why;
  auto kohya_magnitude = kohya("lora_unet_middle_block_1_proj_in", {2, 8}, {8, 2});
  kohya_magnitude.push_back({"lora_unet_middle_block_1_proj_in.lora_magnitude_vector", {8}});
  why = refusal(kohya_magnitude);
  EXPECT_NE(why.find("outside diffusers' (PEFT) names"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

// ---- The DiT families' rules (flux_lora_rules, qwen_image_lora_rules, ...) ----

// A FLUX.1-like transformer and CLIP; Qwen-Image's and Z-Image's transformers.
const LoraModuleTable kFlux = {
    {"transformer",
     {{"transformer_blocks.0.attn.to_q", {8, 8}}, {"single_transformer_blocks.0.proj_mlp", {16, 8}}}},
    {"text_encoder", {{"text_model.encoder.layers.0.self_attn.q_proj", {6, 6}}}}};
const LoraModuleTable kQwen = {
    {"transformer", {{"transformer_blocks.0.attn.to_q", {8, 8}}, {"transformer_blocks.0.img_mlp.net.0.proj", {16, 8}},
                     {"transformer_blocks.0.attn.add_q_proj", {8, 8}}}}};
const LoraModuleTable kZImage = {
    {"transformer", {{"layers.0.attention.to_out.0", {8, 8}}, {"layers.0.feed_forward.w1", {16, 8}},
                     {"all_x_embedder.2-1", {8, 4}}}}};

pipeline::LoraModelFacts facts_of(pipeline::LoraKeyRules (*rules)(), const std::string& label) {
  return {label, 2, rules()};
}

std::string refusal_in(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                       const pipeline::LoraModelFacts& facts) {
  try {
    pipeline::map_lora_keys(keys, modules, facts, "x.safetensors");
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "(accepted)";
}

/// refusal_in(), whose one line must also start with the file's name.
std::string named_refusal_in(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                             const pipeline::LoraModelFacts& facts) {
  const std::string w = refusal_in(keys, modules, facts);
  EXPECT_EQ(w.rfind("'x.safetensors': ", 0), 0u) << w;
  return w;
}

TEST(DitLoraKeys, FluxReadsDiffusersNamesWithTheirAlphas) {
  const auto layers = pipeline::map_lora_keys(
      {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}},
       {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}},
       {"transformer.transformer_blocks.0.attn.to_q.alpha", {}},
       {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight", {1, 6}},
       {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight", {6, 1}}},
      kFlux, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].component, "text_encoder");
  EXPECT_EQ(layers[1].module, "transformer_blocks.0.attn.to_q");
  EXPECT_TRUE(layers[1].alpha_key.has_value());
  EXPECT_FALSE(layers[1].alpha_in_factors);
}

TEST(DitLoraKeys, QwenImageNonDiffusersNamesAreRenamedAsDiffusersConvertsThem) {
  // diffusion_model. + lora_down/lora_up + alpha: alpha / rank into the factors.
  auto keys = kohya("diffusion_model.transformer_blocks.0.attn.to_q", {4, 8}, {8, 4});
  // lora_unet_ with the module's underscores (convert_key's protected n-grams: img_mlp, add_q_proj).
  for (const auto& k : kohya("lora_unet_transformer_blocks_0_img_mlp_net_0_proj", {4, 8}, {16, 4})) keys.push_back(k);
  for (const auto& k : kohya("lora_unet_transformer_blocks_0_attn_add_q_proj", {4, 8}, {8, 4})) keys.push_back(k);
  auto layers = pipeline::map_lora_keys(keys, kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image"), "x.safetensors");
  ASSERT_EQ(layers.size(), 3u);
  for (const auto& l : layers) {
    EXPECT_EQ(l.component, "transformer");
    EXPECT_TRUE(l.alpha_in_factors) << l.module;
  }
  // Bare module names with PEFT's "default." adapter name, lora_A/lora_B: the alpha is dropped.
  layers = pipeline::map_lora_keys({{"transformer_blocks.0.attn.to_q.lora_A.default.weight", {2, 8}},
                                    {"transformer_blocks.0.attn.to_q.lora_B.default.weight", {8, 2}},
                                    {"transformer_blocks.0.attn.to_q.alpha", {}}},
                                   kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image"), "x.safetensors");
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].module, "transformer_blocks.0.attn.to_q");
  EXPECT_EQ(layers[0].down_key, "transformer_blocks.0.attn.to_q.lora_A.default.weight");  // the file's own key
  EXPECT_FALSE(layers[0].alpha_key.has_value());
  EXPECT_FALSE(layers[0].alpha_in_factors);
}

TEST(DitLoraKeys, ZImageOriginalOutProjectionIsToOut0) {
  auto keys = kohya("diffusion_model.layers.0.attention.out", {4, 8}, {8, 4});
  for (const auto& k : kohya("diffusion_model.layers.0.feed_forward.w1", {4, 8}, {16, 4})) keys.push_back(k);
  for (const auto& k : kohya("diffusion_model.all_x_embedder.2-1", {2, 4}, {8, 2})) keys.push_back(k);
  const auto layers = pipeline::map_lora_keys(keys, kZImage, facts_of(pipeline::z_image_lora_rules, "Z-Image"), "x.safetensors");
  std::set<std::string> got;
  for (const auto& l : layers) got.insert(l.module);
  EXPECT_EQ(got, (std::set<std::string>{"layers.0.attention.to_out.0", "layers.0.feed_forward.w1",
                                         "all_x_embedder.2-1"}));
  // The rename is Z-Image's, and for lora_down/lora_up layers only (normalize_out_key's pattern).
  EXPECT_NE(refusal_in({{"transformer.layers.0.attention.out.lora_A.weight", {2, 8}},
                        {"transformer.layers.0.attention.out.lora_B.weight", {8, 2}}},
                       kZImage, facts_of(pipeline::z_image_lora_rules, "Z-Image"))
                .find("none of its 1 LoRA layer(s) match"),
            std::string::npos);
}

// What QwenImageLoraLoaderMixin / ZImageLoraLoaderMixin.lora_state_dict load nothing from, or fail on
// (tools/fixtures/survey_lora_spellings.py's "bare" and Z-Image "kohya" rows).
TEST(DitLoraKeys, OriginalNamesDiffusersDoesNotConvertAreRefusedInOneLine) {
  // Bare module names with lora_A/lora_B and nothing that starts the converter: they load nowhere.
  const std::vector<LoraTensorKey> bare = {{"transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}},
                                           {"transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}}};
  const std::string qwen = refusal_in(bare, kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image"));
  EXPECT_NE(qwen.find("key 'transformer_blocks.0.attn.to_q.lora_A.weight' names no component, and diffusers 0.36 "
                      "converts a Qwen-Image LoRA from the transformer's own names only when"),
            std::string::npos) << qwen;
  // The same with an alpha: the converter runs (its lora_A alpha is dropped).
  std::vector<LoraTensorKey> with_alpha = bare;
  with_alpha.push_back({"transformer_blocks.0.attn.to_q.alpha", {}});
  EXPECT_EQ(refusal_in(with_alpha, kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image")), "(accepted)");
  // PEFT's transformer. names with an alpha: the alpha starts the converter, which puts transformer. before every key
  // again, and diffusers 0.36 fails ("Target modules ... not found in the base model"); so on Z-Image.
  std::vector<LoraTensorKey> peft_alpha = {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}},
                                           {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}},
                                           {"transformer.transformer_blocks.0.attn.to_q.alpha", {}}};
  const std::string twice = refusal_in(peft_alpha, kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image"));
  EXPECT_NE(twice.find("key 'transformer.transformer_blocks.0.attn.to_q.lora_A.weight' starts with transformer. in a "
                       "file that starts diffusers 0.36's Qwen-Image converter"),
            std::string::npos) << twice;
  peft_alpha = {{"transformer.layers.0.attention.to_q.lora_A.weight", {2, 8}},
                {"transformer.layers.0.attention.to_q.lora_B.weight", {8, 2}},
                {"transformer.layers.0.attention.to_q.alpha", {}}};
  EXPECT_NE(refusal_in(peft_alpha, kZImage, facts_of(pipeline::z_image_lora_rules, "Z-Image")).find("Target modules ... not found"),
            std::string::npos);
  // Z-Image's lora_unet_ form: diffusers 0.36 fails on every such file; Qwen-Image's reads it.
  const auto unet = kohya("lora_unet_layers_0_feed_forward_w1", {4, 8}, {16, 4});
  const std::string z = refusal_in(unet, kZImage, facts_of(pipeline::z_image_lora_rules, "Z-Image"));
  EXPECT_NE(z.find("key 'lora_unet_layers_0_feed_forward_w1.lora_down.weight' is in the lora_unet_ form, on which "
                   "diffusers 0.36 fails for every Z-Image file"),
            std::string::npos) << z;
}

// load_lora_adapter respells a denoiser's keys only when its first has no lora_A (lora_component_spellings.h).
TEST(DitLoraKeys, ADenoiserMixingSpellingsIsRefusedWhereDiffusersDropsSome) {
  const std::vector<LoraTensorKey> peft_first = {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}},
                                                 {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}},
                                                 {"transformer.transformer_blocks.0.attn.to_v.lora.down.weight", {2, 8}},
                                                 {"transformer.transformer_blocks.0.attn.to_v.lora.up.weight", {8, 2}}};
  const std::string mixed = refusal_in(peft_first, kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image"));
  EXPECT_NE(mixed.find("its transformer layers mix spellings (key 'transformer.transformer_blocks.0.attn.to_v.lora.down"
                       ".weight' beside 'transformer.transformer_blocks.0.attn.to_q.lora_A.weight')"),
            std::string::npos) << mixed;
  // The first key in another spelling: diffusers respells every key, and so both layers merge.
  const std::vector<LoraTensorKey> old_first = {{"transformer.transformer_blocks.0.attn.add_q_proj.lora.down.weight", {2, 8}},
                                                {"transformer.transformer_blocks.0.attn.add_q_proj.lora.up.weight", {8, 2}},
                                                {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {2, 8}},
                                                {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {8, 2}}};
  EXPECT_EQ(refusal_in(old_first, kQwen, facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image")), "(accepted)");
}

TEST(DitLoraKeys, FormatsADitFamilyDoesNotReadAreRefusedByName) {
  const auto flux = facts_of(pipeline::flux_lora_rules, "FLUX.1");
  // BFL's block names with lora_A/lora_B factors: diffusers 0.36 loads nothing from such a file.
  const std::string bfl = refusal_in({{"diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight", {2, 8}},
                                      {"diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight", {24, 2}}},
                                     kFlux, flux);
  EXPECT_NE(bfl.find("BFL's FLUX.1 block names with lora_A/lora_B factors"), std::string::npos) << bfl;
  EXPECT_NE(bfl.find("diffusers 0.36 loads nothing"), std::string::npos) << bfl;
  EXPECT_NE(bfl.find("transformer.<module>.lora_A.weight"), std::string::npos) << bfl;
  EXPECT_NE(bfl.find("or a kohya one"), std::string::npos) << bfl;
  const std::string sd3 =
      refusal_in({{"lora_unet_joint_blocks_0_x_block_attn_qkv.lora_down.weight", {2, 8}}}, kFlux,
                 facts_of(pipeline::stable_diffusion_3_lora_rules, "Stable Diffusion 3"));
  EXPECT_NE(sd3.find("original SD3 MMDiT names"), std::string::npos) << sd3;
  // SDXL's kohya and PEFT LoRAs, whose text-encoder layers would fit FLUX.1's CLIP by name.
  const std::string te1 = refusal_in(kohya("lora_te1_text_model_encoder_layers_0_self_attn_q_proj", {2, 6}, {6, 2}),
                                     kFlux, flux);
  EXPECT_NE(te1.find("a LoRA for a UNet model (SDXL)"), std::string::npos) << te1;
  for (const auto& keys : {kohya("lora_unet_mid_block_attentions_0_proj_in", {2, 8}, {8, 2}),
                           std::vector<LoraTensorKey>{{"unet.mid_block.attentions.0.proj_in.lora_A.weight", {3, 8}},
                                                      {"unet.mid_block.attentions.0.proj_in.lora_B.weight", {8, 3}}}}) {
    const std::string unet = refusal_in(keys, kFlux, flux);
    EXPECT_NE(unet.find("a LoRA for a UNet model"), std::string::npos) << unet;
  }
  // Qwen-Image's lora_unet_ is its own transformer's prefix, but SDXL's block names match nothing there.
  const std::string sdxl_on_qwen = refusal_in(kohya("lora_unet_input_blocks_4_1_proj_in", {2, 8}, {8, 2}), kQwen,
                                              facts_of(pipeline::qwen_image_lora_rules, "Qwen-Image"));
  EXPECT_NE(sdxl_on_qwen.find("none of its 1 LoRA layer(s) match"), std::string::npos) << sdxl_on_qwen;
  // FluxLoraLoaderMixin's branches after XLabs': BFL's Control LoRAs and fal's Kontext LoRAs, each named for what it
  // is (not as a BFL-named PEFT file, whose refusal says diffusers loads nothing).
  const std::string control = refusal_in({{"double_blocks.0.img_attn.norm.query_norm.scale", {8}},
                                          {"double_blocks.0.img_attn.qkv.lora_A.weight", {2, 8}},
                                          {"double_blocks.0.img_attn.qkv.lora_B.weight", {24, 2}}},
                                         kFlux, flux);
  EXPECT_NE(control.find("a BFL FLUX.1 Control LoRA (key 'double_blocks.0.img_attn.norm.query_norm.scale'"),
            std::string::npos) << control;
  EXPECT_NE(control.find("FluxControlPipeline"), std::string::npos) << control;
  const std::string kontext = refusal_in({{"base_model.model.double_blocks.0.img_attn.qkv.lora_A.weight", {2, 8}},
                                          {"base_model.model.double_blocks.0.img_attn.qkv.lora_B.weight", {24, 2}}},
                                         kFlux, facts_of(pipeline::chroma_lora_rules, "Chroma"));
  EXPECT_NE(kontext.find("a fal FLUX.1 Kontext LoRA (key 'base_model.model.double_blocks.0.img_attn.qkv.lora_A.weight'"),
            std::string::npos) << kontext;
  EXPECT_EQ(kontext.find('\n'), std::string::npos);
}

// ---- FLUX.1's kohya / sd-scripts files (lora_flux_keys.h) ----

// Double block 0 and single block 0 of a FLUX.1-like transformer (attention width 8, MLP 32), and CLIP.
const LoraModuleTable kFluxBfl = {
    {"transformer",
     {{"transformer_blocks.0.attn.to_q", {8, 8}},
      {"transformer_blocks.0.attn.to_k", {8, 8}},
      {"transformer_blocks.0.attn.to_v", {8, 8}},
      {"transformer_blocks.0.attn.to_out.0", {8, 8}},
      {"transformer_blocks.0.attn.add_q_proj", {8, 8}},
      {"transformer_blocks.0.norm1.linear", {48, 8}},
      {"single_transformer_blocks.0.attn.to_q", {8, 8}},
      {"single_transformer_blocks.0.attn.to_k", {8, 8}},
      {"single_transformer_blocks.0.attn.to_v", {8, 8}},
      {"single_transformer_blocks.0.proj_mlp", {32, 8}},
      {"single_transformer_blocks.0.proj_out", {8, 40}},
      {"x_embedder", {8, 4}}}},
    {"text_encoder",
     {{"text_model.encoder.layers.0.self_attn.q_proj", {6, 6}},
      {"text_model.encoder.layers.0.self_attn.out_proj", {6, 6}},
      {"text_model.encoder.layers.0.mlp.fc1", {10, 6}}}}};

TEST(KohyaFluxLoraKeys, FusedLayersSplitIntoDiffusersModulesByRowsOfTheUpFactor) {
  std::vector<LoraTensorKey> keys;
  const auto add = [&](const std::vector<LoraTensorKey>& k) { keys.insert(keys.end(), k.begin(), k.end()); };
  add(kohya("lora_unet_single_blocks_0_linear1", {4, 8}, {56, 4}));      // q, k, v (8 rows each), proj_mlp (32)
  add(kohya("lora_unet_double_blocks_0_img_attn_qkv", {4, 8}, {24, 4}));
  add(kohya("lora_unet_double_blocks_0_img_mod_lin", {4, 8}, {48, 4}));
  // ComfyUI's form: BFL's dotted names after diffusion_model., CLIP's after text_encoders.clip_l.transformer.
  keys.push_back({"diffusion_model.double_blocks.0.img_attn.proj.lora_down.weight", {4, 8}});
  keys.push_back({"diffusion_model.double_blocks.0.img_attn.proj.lora_up.weight", {8, 4}});
  keys.push_back({"text_encoders.clip_l.transformer.text_model.encoder.layers.0.self_attn.out_proj.lora_down.weight", {2, 6}});
  keys.push_back({"text_encoders.clip_l.transformer.text_model.encoder.layers.0.self_attn.out_proj.lora_up.weight", {6, 2}});
  add(kohya("lora_te_text_model_encoder_layers_0_self_attn_q_proj", {2, 6}, {6, 2}));
  // Dropped by diffusers 0.36, so by dpinfer: CLIP as lora_te1_, the embedders and final layer.
  add(kohya("lora_te1_text_model_encoder_layers_0_mlp_fc1", {2, 6}, {10, 2}));
  add(kohya("lora_unet_img_in", {4, 4}, {8, 4}));
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, kFluxBfl, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors", &ignored);
  // diffusers' order: double block 0 (img_attn_proj, img_attn_qkv, ..., img_mod_lin), single block 0, CLIP.
  std::vector<std::string> got;
  for (const auto& l : layers) got.push_back(l.component + "." + l.module);
  EXPECT_EQ(got, (std::vector<std::string>{
                     "transformer.transformer_blocks.0.attn.to_out.0", "transformer.transformer_blocks.0.attn.to_q",
                     "transformer.transformer_blocks.0.attn.to_k", "transformer.transformer_blocks.0.attn.to_v",
                     "transformer.transformer_blocks.0.norm1.linear", "transformer.single_transformer_blocks.0.attn.to_q",
                     "transformer.single_transformer_blocks.0.attn.to_k", "transformer.single_transformer_blocks.0.attn.to_v",
                     "transformer.single_transformer_blocks.0.proj_mlp",
                     "text_encoder.text_model.encoder.layers.0.self_attn.q_proj",
                     "text_encoder.text_model.encoder.layers.0.self_attn.out_proj"}));
  ASSERT_EQ(layers.size(), 11u);
  const std::vector<std::pair<int64_t, int64_t>> rows = {{0, 8}, {8, 16}, {16, 24}, {0, 8}, {8, 16}, {16, 24}, {24, 56}};
  const std::vector<size_t> fused = {1, 2, 3, 5, 6, 7, 8};
  for (size_t i = 0; i < fused.size(); ++i) {
    const auto& l = layers[fused[i]];
    ASSERT_TRUE(l.up_rows.has_value()) << l.module;
    EXPECT_EQ(std::make_pair(l.up_rows->begin, l.up_rows->end), rows[i]) << l.module;
    EXPECT_EQ(l.part, i < 3 ? static_cast<int>(i) : static_cast<int>(i - 3)) << l.module;
    EXPECT_EQ(l.parts, i < 3 ? 3 : 4) << l.module;
    EXPECT_EQ(l.rank, 4) << l.module;
  }
  EXPECT_EQ(layers[8].up_key, "lora_unet_single_blocks_0_linear1.lora_up.weight");  // the file's own keys
  EXPECT_EQ(layers[0].down_key, "diffusion_model.double_blocks.0.img_attn.proj.lora_down.weight");
  EXPECT_FALSE(layers[0].up_rows.has_value());
  EXPECT_FALSE(layers[4].up_rows.has_value());
  for (const auto& l : layers) {
    EXPECT_TRUE(l.alpha_in_factors) << l.module;
  }
  EXPECT_EQ(ignored.size(), 2u);
  std::string all;
  for (const auto& line : ignored) all += line + "|";
  EXPECT_NE(all.find("lora_te1_text_model_encoder_layers_0_mlp_fc1"), std::string::npos) << all;
  EXPECT_NE(all.find("img_in"), std::string::npos) << all;
}

TEST(KohyaFluxLoraKeys, AnSdScriptsFileForFluxDevMapsEveryLayerAtFluxSizes) {
  // FLUX.1-dev's transformer (19 double blocks, 38 single, width 3072, MLP 12288) and an sd-scripts
  // LoRA of rank 16 on every layer of diffusers' table: 19 * 14 + 38 * 6 modules; linear1's up factor
  // splits at diffusers' hard-coded [3072, 3072, 3072, 12288].
  const int64_t d = 3072, mlp = 12288, r = 16;
  LoraModuleTable modules;
  auto& t = modules["transformer"];
  std::vector<LoraTensorKey> keys;
  const auto add = [&](const std::string& name, int64_t out, int64_t in) {
    for (const auto& k : kohya(name, {r, in}, {out, r})) keys.push_back(k);
  };
  for (int i = 0; i < 19; ++i) {
    const std::string m = "transformer_blocks." + std::to_string(i) + ".";
    for (const char* n : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                          "attn.add_v_proj", "attn.to_add_out"})
      t[m + n] = {d, d};
    t[m + "ff.net.0.proj"] = t[m + "ff_context.net.0.proj"] = {mlp, d};
    t[m + "ff.net.2"] = t[m + "ff_context.net.2"] = {d, mlp};
    t[m + "norm1.linear"] = t[m + "norm1_context.linear"] = {6 * d, d};
    const std::string k = "lora_unet_double_blocks_" + std::to_string(i) + "_";
    for (const char* s : {"img", "txt"}) {
      add(k + s + "_attn_qkv", 3 * d, d);
      add(k + s + "_attn_proj", d, d);
      add(k + s + "_mlp_0", mlp, d);
      add(k + s + "_mlp_2", d, mlp);
      add(k + s + "_mod_lin", 6 * d, d);
    }
  }
  for (int i = 0; i < 38; ++i) {
    const std::string m = "single_transformer_blocks." + std::to_string(i) + ".";
    t[m + "attn.to_q"] = t[m + "attn.to_k"] = t[m + "attn.to_v"] = {d, d};
    t[m + "proj_mlp"] = {mlp, d};
    t[m + "proj_out"] = {d, d + mlp};
    t[m + "norm.linear"] = {3 * d, d};
    const std::string k = "lora_unet_single_blocks_" + std::to_string(i) + "_";
    add(k + "linear1", 3 * d + mlp, d);
    add(k + "linear2", d, d + mlp);
    add(k + "modulation_lin", 3 * d, d);
  }
  const auto layers = pipeline::map_lora_keys(keys, modules, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors");
  ASSERT_EQ(layers.size(), 19u * 14 + 38u * 6);
  EXPECT_EQ(layers.front().module, "transformer_blocks.0.attn.to_out.0");  // img_attn_proj: the first rank
  std::map<std::string, std::pair<int64_t, int64_t>> rows;
  for (const auto& l : layers)
    if (l.up_rows) rows[l.module] = {l.up_rows->begin, l.up_rows->end};
  EXPECT_EQ(rows.size(), 19u * 6 + 38u * 4);
  EXPECT_EQ(rows["single_transformer_blocks.37.attn.to_v"], std::make_pair(2 * d, 3 * d));
  EXPECT_EQ(rows["single_transformer_blocks.37.proj_mlp"], std::make_pair(3 * d, 3 * d + mlp));
  EXPECT_EQ(rows["transformer_blocks.18.attn.add_k_proj"], std::make_pair(d, 2 * d));
}

TEST(KohyaFluxLoraKeys, RefusalsNameTheFileAndTheLayerInOneLine) {
  const auto flux = facts_of(pipeline::flux_lora_rules, "FLUX.1");
  // linear1's up factor must cover q, k, v and proj_mlp: 56 rows here.
  const std::string rows = refusal_in(kohya("lora_unet_single_blocks_0_linear1", {4, 8}, {24, 4}), kFluxBfl, flux);
  EXPECT_NE(rows.find("'lora_unet_single_blocks_0_linear1' has down [4, 8] and up [24, 4], which do not fit "
                      "transformer.single_transformer_blocks.0.attn.to_q.weight, attn.to_k.weight, attn.to_v.weight and "
                      "proj_mlp.weight stacked [56, 8]"),
            std::string::npos)
      << rows;
  // A BFL layer dpinfer's table (diffusers') does not have, and a block the model lacks.
  for (const char* name : {"lora_unet_double_blocks_0_img_attn_norm", "lora_unet_double_blocks_7_img_attn_proj"}) {
    const std::string why = refusal_in(kohya(name, {4, 8}, {8, 4}), kFluxBfl, flux);
    EXPECT_NE(why.find("match no weight of this FLUX.1 model, e.g. '" + std::string(name)), std::string::npos) << why;
  }
  // CLIP q/k/v without out_proj or mlp layers: diffusers 0.36 cannot load the file.
  const std::string clip = refusal_in(kohya("lora_te_text_model_encoder_layers_0_self_attn_q_proj", {2, 6}, {6, 2}),
                                      kFluxBfl, flux);
  EXPECT_NE(clip.find("Could not automatically infer state dict type"), std::string::npos) << clip;
  // ... and beside an mlp layer, diffusers drops them (and the mlp layer loads).
  auto keys = kohya("lora_te_text_model_encoder_layers_0_self_attn_q_proj", {2, 6}, {6, 2});
  for (const auto& k : kohya("lora_te_text_model_encoder_layers_0_mlp_fc1", {2, 6}, {10, 2})) keys.push_back(k);
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, kFluxBfl, flux, "x.safetensors", &ignored);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].module, "text_model.encoder.layers.0.mlp.fc1");
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("without an out_proj layer"), std::string::npos) << ignored[0];
  // Incomplete layers, and keys that are no kohya FLUX.1 keys.
  EXPECT_NE(refusal_in({{"lora_unet_double_blocks_0_img_attn_proj.lora_down.weight", {4, 8}}}, kFluxBfl, flux)
                .find("has its lora_down weight but not its lora_up weight"),
            std::string::npos);
  keys = kohya("lora_unet_double_blocks_0_img_attn_proj", {4, 8}, {8, 4});
  keys.push_back({"something_else", {2}});
  EXPECT_NE(refusal_in(keys, kFluxBfl, flux).find("'something_else' is not a kohya FLUX.1 LoRA key"), std::string::npos);
  // A kohya FLUX.1 LoRA on SDXL, and SDXL's kohya LoRA on FLUX.1.
  const std::string on_sdxl = refusal(kohya("lora_unet_double_blocks_0_img_attn_qkv", {4, 8}, {24, 4}));
  EXPECT_NE(on_sdxl.find("a FLUX.1 LoRA (BFL's block names; key 'lora_unet_double_blocks_0_img_attn_qkv.lora_"),
            std::string::npos)
      << on_sdxl;
  EXPECT_NE(on_sdxl.find("not for this Stable Diffusion XL model"), std::string::npos) << on_sdxl;
  const std::string on_flux =
      refusal_in(kohya("lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q", {2, 8}, {8, 2}), kFluxBfl, flux);
  EXPECT_NE(on_flux.find("a LoRA for a UNet model"), std::string::npos) << on_flux;
}

TEST(KohyaFluxLoraKeys, LoraDownKeysBesideTransformerKeysKeepTheTransformersWithoutAlphas) {
  // _convert_kohya_flux_lora_to_diffusers's has_peft_state_dict branch: the transformer. layers only, no alphas.
  auto keys = kohya("transformer.transformer_blocks.0.attn.to_q", {2, 8}, {8, 2});
  for (const auto& k : kohya("lora_unet_double_blocks_0_img_attn_norm", {2, 8}, {8, 2})) keys.push_back(k);
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, kFluxBfl, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors", &ignored);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].module, "transformer_blocks.0.attn.to_q");
  EXPECT_FALSE(layers[0].alpha_key.has_value());
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("outside \"transformer.\" (e.g. 'lora_unet_double_blocks_0_img_attn_norm."), std::string::npos)
      << ignored[0];
}

// ---- FLUX.2's files in BFL's names (lora_flux2_keys.h) ----

// A FLUX.2 transformer's modules: one double and one single block, inner 8, MLP 12 (SwiGLU: 24 rows in), the embedders.
const LoraModuleTable kFlux2 = [] {
  LoraModuleTable t;
  auto& m = t["transformer"];
  for (const char* p : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"})
    m[std::string("transformer_blocks.0.attn.") + p] = {8, 8};
  m["transformer_blocks.0.ff.linear_in"] = m["transformer_blocks.0.ff_context.linear_in"] = {24, 8};
  m["transformer_blocks.0.ff.linear_out"] = m["transformer_blocks.0.ff_context.linear_out"] = {8, 12};
  m["single_transformer_blocks.0.attn.to_qkv_mlp_proj"] = {48, 8};
  m["single_transformer_blocks.0.attn.to_out"] = {8, 20};
  m["x_embedder"] = {8, 16};
  m["context_embedder"] = {8, 12};
  return t;
}();

TEST(Flux2LoraKeys, BflLayersAreDiffusersModulesInTheConvertersOrder) {
  const std::vector<LoraTensorKey> keys = {
      {"diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight", {3, 8}},
      {"diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight", {24, 3}},
      {"diffusion_model.double_blocks.0.txt_mlp.2.lora_down.weight", {2, 12}},  // ComfyUI's factor names
      {"diffusion_model.double_blocks.0.txt_mlp.2.lora_up.weight", {8, 2}},
      {"diffusion_model.img_in.lora_A.weight", {4, 16}},
      {"diffusion_model.img_in.lora_B.weight", {8, 4}},
      {"base_model.model.single_blocks.0.linear1.lora_A.weight", {2, 8}},  // PEFT's prefix
      {"base_model.model.single_blocks.0.linear1.lora_B.weight", {48, 2}}};
  const auto layers =
      pipeline::map_lora_keys(keys, kFlux2, facts_of(pipeline::flux2_lora_rules, "FLUX.2 [klein]"), "x.safetensors");
  // Single blocks, then double blocks (qkv, proj, mlp), then the other layers: where PEFT's lora_alpha comes from.
  const std::vector<std::string> want = {"single_transformer_blocks.0.attn.to_qkv_mlp_proj",
                                         "transformer_blocks.0.attn.to_q",
                                         "transformer_blocks.0.attn.to_k",
                                         "transformer_blocks.0.attn.to_v",
                                         "transformer_blocks.0.ff_context.linear_out",
                                         "x_embedder"};
  ASSERT_EQ(layers.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(layers[i].module, want[i]);
    EXPECT_EQ(layers[i].component, "transformer");
    EXPECT_FALSE(layers[i].alpha_key.has_value());
  }
  EXPECT_EQ(layers[0].rank, 2);
  EXPECT_FALSE(layers[0].up_rows.has_value());  // linear1 stays fused in FLUX.2's single blocks
  // torch.chunk(lora_B, 3): to_k's rows 8..16, the whole lora_A, whatever its zeros.
  ASSERT_TRUE(layers[2].up_rows.has_value());
  EXPECT_EQ(layers[2].up_rows->begin, 8);
  EXPECT_EQ(layers[2].up_rows->end, 16);
  EXPECT_EQ(layers[2].down_key, "diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight");
  EXPECT_FALSE(layers[2].split_block_diagonal);
  EXPECT_EQ(layers[4].up_key, "diffusion_model.double_blocks.0.txt_mlp.2.lora_up.weight");
}

TEST(Flux2LoraKeys, WhatDiffusersCannotConvertIsRefusedInOneLine) {
  const auto flux2 = facts_of(pipeline::flux2_lora_rules, "FLUX.2 [klein]");
  const auto why = [&](const std::vector<LoraTensorKey>& keys) { return named_refusal_in(keys, kFlux2, flux2); };
  const std::vector<LoraTensorKey> proj = {{"diffusion_model.double_blocks.0.img_attn.proj.lora_A.weight", {2, 8}},
                                           {"diffusion_model.double_blocks.0.img_attn.proj.lora_B.weight", {8, 2}}};
  auto with = [&](LoraTensorKey k) {
    std::vector<LoraTensorKey> keys = proj;
    keys.push_back(std::move(k));
    return keys;
  };
  EXPECT_NE(why(with({"diffusion_model.double_blocks.0.img_attn.proj.alpha", {}})).find("drop the alphas"),
            std::string::npos);
  EXPECT_NE(why(with({"transformer.x_embedder.lora_A.weight", {2, 16}})).find("has no diffusion_model. prefix"),
            std::string::npos);
  EXPECT_NE(why(with({"diffusion_model.double_blocks.0.img_mod.lin.lora_A.weight", {2, 8}}))
                .find("is not a FLUX.2 LoRA factor in BFL's names"),
            std::string::npos);  // FLUX.1's per-block modulation
  EXPECT_NE(why({proj[0]}).find("has its lora_A factor but not its lora_B"), std::string::npos);
  EXPECT_NE(why(with({"diffusion_model.double_blocks.3.img_attn.proj.lora_A.weight", {2, 8}}))
                .find("has its lora_A factor but not its lora_B"),
            std::string::npos);
  std::vector<LoraTensorKey> other_block = {{"diffusion_model.double_blocks.3.img_attn.proj.lora_A.weight", {2, 8}},
                                            {"diffusion_model.double_blocks.3.img_attn.proj.lora_B.weight", {8, 2}}};
  EXPECT_NE(why(other_block).find("match no weight of this model"), std::string::npos);
  // Diffusers' names with an alpha: Flux2LoraLoaderMixin's "Invalid LoRA checkpoint".
  EXPECT_NE(why({{"transformer.x_embedder.lora_A.weight", {2, 16}}, {"transformer.x_embedder.lora_B.weight", {8, 2}},
                 {"transformer.x_embedder.alpha", {}}}),
            "(accepted)");
}

// ---- FLUX.1's XLabs files (lora_flux_xlabs_keys.h) ----

/// An XLabs layer's factors: "<name>.down.weight" [r, in] and "<name>.up.weight" [out, r].
std::vector<LoraTensorKey> xlabs(const std::string& name, std::vector<int64_t> down, std::vector<int64_t> up) {
  return {{name + ".down.weight", down}, {name + ".up.weight", up}};
}

TEST(XlabsFluxLoraKeys, ProcessorLayersAreTheAttentionProjectionsInDiffusersOrder) {
  LoraModuleTable table = kFluxBfl;
  for (const char* m : {"attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"})
    table["transformer"][std::string("transformer_blocks.0.") + m] = {8, 8};
  std::vector<LoraTensorKey> keys;
  const auto add = [&](const std::vector<LoraTensorKey>& k) { keys.insert(keys.end(), k.begin(), k.end()); };
  add(xlabs("single_blocks.0.processor.qkv_lora", {4, 8}, {24, 4}));
  add(xlabs("single_blocks.0.processor.proj_lora", {4, 8}, {8, 4}));  // proj_out [8, 40]: down zero-padded
  add(xlabs("double_blocks.0.processor.qkv_lora2", {3, 8}, {24, 3}));
  add(xlabs("double_blocks.0.processor.qkv_lora1", {4, 8}, {24, 4}));
  add(xlabs("diffusion_model.double_blocks.0.processor.proj_lora2", {2, 8}, {8, 2}));
  add(xlabs("double_blocks.0.processor.proj_lora1", {4, 8}, {8, 4}));
  keys.push_back({"some_other.processor_note", {1}});  // kept unconverted by diffusers, then ignored
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, table, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors", &ignored);
  // Sorted keys ("diffusion_model." first); a fused layer's B factors come at its down key, the others' at their up key.
  const std::vector<std::string> want = {
      "transformer_blocks.0.attn.to_add_out",   "transformer_blocks.0.attn.to_out.0",
      "transformer_blocks.0.attn.to_q",         "transformer_blocks.0.attn.to_k",
      "transformer_blocks.0.attn.to_v",         "transformer_blocks.0.attn.add_q_proj",
      "transformer_blocks.0.attn.add_k_proj",   "transformer_blocks.0.attn.add_v_proj",
      "single_transformer_blocks.0.proj_out",   "single_transformer_blocks.0.attn.to_q",
      "single_transformer_blocks.0.attn.to_k",  "single_transformer_blocks.0.attn.to_v"};
  ASSERT_EQ(layers.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i]);
    EXPECT_EQ(layers[i].component, "transformer");
    EXPECT_EQ(layers[i].module, want[i]);
    EXPECT_FALSE(layers[i].alpha_key.has_value());  // "xlabs doesn't use alpha"
    EXPECT_FALSE(layers[i].alpha_in_factors);
    EXPECT_FALSE(layers[i].split_block_diagonal);
  }
  // handle_qkv: equal thirds of the up factor's rows, the whole down factor, rank r for each.
  EXPECT_EQ(layers[6].down_key, "double_blocks.0.processor.qkv_lora2.down.weight");
  EXPECT_EQ(layers[6].rank, 3);
  ASSERT_TRUE(layers[6].up_rows.has_value());  // add_k_proj: the second third
  EXPECT_EQ(layers[6].up_rows->begin, 8);
  EXPECT_EQ(layers[6].up_rows->end, 16);
  EXPECT_EQ(layers[6].part, 1);
  EXPECT_EQ(layers[6].parts, 3);
  EXPECT_FALSE(layers[1].up_rows.has_value());
  EXPECT_EQ(layers[1].down_padded_to, 0);
  EXPECT_EQ(layers[8].down_padded_to, 40);  // _maybe_expand_lora_state_dict: to proj_out's input width
  EXPECT_EQ(layers[8].rank, 4);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("'some_other.processor_note'"), std::string::npos) << ignored[0];
}

TEST(XlabsFluxLoraKeys, WhatDiffusersCannotLoadIsRefusedInOneLine) {
  const auto flux = facts_of(pipeline::flux_lora_rules, "FLUX.1");
  const auto why = [&](const std::vector<LoraTensorKey>& keys) { return named_refusal_in(keys, kFluxBfl, flux); };
  // A layer without its up factor (KeyError in handle_qkv, or a key left over).
  EXPECT_NE(why({{"double_blocks.0.processor.qkv_lora1.down.weight", {4, 8}}}).find("has its down weight but not its up"),
            std::string::npos);
  // Not a processor factor diffusers converts.
  EXPECT_NE(why(xlabs("double_blocks.0.processor.qkv_lora3", {4, 8}, {24, 4})).find("is not an XLabs FLUX.1 LoRA factor"),
            std::string::npos);
  EXPECT_NE(why({{"double_blocks.0.processor.proj_lora1.alpha", {}}}).find("'double_blocks.0.processor.proj_lora1.alpha'"),
            std::string::npos);
  // The same layer with and without "diffusion_model.".
  auto twice = xlabs("double_blocks.0.processor.proj_lora1", {4, 8}, {8, 4});
  for (const auto& k : xlabs("diffusion_model.double_blocks.0.processor.proj_lora1", {4, 8}, {8, 4})) twice.push_back(k);
  EXPECT_NE(why(twice).find("are the same XLabs layer"), std::string::npos);
  // A down factor wider than its weight's input (diffusers: NotImplementedError).
  EXPECT_NE(why(xlabs("single_blocks.0.processor.proj_lora", {4, 48}, {8, 4})).find("do not fit"), std::string::npos);
  // Factors that do not fit, a block the model lacks, diffusers' names beside XLabs ones.
  EXPECT_NE(why(xlabs("double_blocks.0.processor.qkv_lora1", {4, 8}, {21, 4})).find("do not fit"), std::string::npos);
  EXPECT_NE(why(xlabs("double_blocks.3.processor.proj_lora1", {4, 8}, {8, 4})).find("match no weight"), std::string::npos);
  auto mixed = xlabs("double_blocks.0.processor.proj_lora1", {4, 8}, {8, 4});
  mixed.push_back({"transformer.x_embedder.lora_A.weight", {2, 4}});
  EXPECT_NE(why(mixed).find("one format per file"), std::string::npos);
  EXPECT_NE(why({{"a.processor.b", {1}}}).find("without a double_blocks or single_blocks layer"), std::string::npos);
  // With a lora_down key anywhere, diffusers takes the kohya path first.
  auto kohya_first = xlabs("double_blocks.0.processor.proj_lora1", {4, 8}, {8, 4});
  for (const auto& k : kohya("lora_unet_double_blocks_0_img_attn_proj", {4, 8}, {8, 4})) kohya_first.push_back(k);
  EXPECT_NE(why(kohya_first).find("is not a kohya FLUX.1 LoRA key"), std::string::npos);
}

// ---- FLUX.1 files in diffusers' underscored names (lora_flux_mixture_keys.h) ----

TEST(MixtureFluxLoraKeys, UnderscoredNamesMapAsTheConverterMapsThem) {
  std::vector<LoraTensorKey> keys;
  const auto add = [&](const std::vector<LoraTensorKey>& k) { keys.insert(keys.end(), k.begin(), k.end()); };
  add(kohya("lora_transformer_transformer_blocks_0_attn_to_out_0", {4, 8}, {8, 4}));
  add(kohya("lora_transformer_transformer_blocks_0_attn_add_q_proj", {4, 8}, {8, 4}));
  add(kohya("lora_transformer_single_transformer_blocks_0_attn_to_k", {4, 8}, {8, 4}));
  add(kohya("lora_transformer_x_embedder", {4, 4}, {8, 4}));
  add(kohya("lora_te1_text_model_encoder_layers_0_self_attn_q_proj", {2, 6}, {6, 2}));
  add(kohya("lora_te1_text_model_encoder_layers_0_mlp_fc1", {3, 6}, {10, 3}));
  add(kohya("lora_unet_double_blocks_0_img_attn_proj", {4, 8}, {8, 4}));  // dropped
  std::vector<std::string> ignored;
  const auto layers = pipeline::map_lora_keys(keys, kFluxBfl, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors", &ignored);
  std::map<std::string, std::string> got;
  for (const auto& l : layers) {
    got[l.component + "." + l.module] = l.down_key;
    EXPECT_TRUE(l.alpha_in_factors);
    EXPECT_TRUE(l.alpha_divided_in_its_dtype);
    EXPECT_TRUE(l.alpha_key.has_value());
    EXPECT_FALSE(l.up_rows.has_value());
  }
  const std::map<std::string, std::string> want = {
      {"transformer.transformer_blocks.0.attn.to_out.0", "lora_transformer_transformer_blocks_0_attn_to_out_0.lora_down.weight"},
      {"transformer.transformer_blocks.0.attn.add_q_proj", "lora_transformer_transformer_blocks_0_attn_add_q_proj.lora_down.weight"},
      {"transformer.single_transformer_blocks.0.attn.to_k", "lora_transformer_single_transformer_blocks_0_attn_to_k.lora_down.weight"},
      {"transformer.x_embedder", "lora_transformer_x_embedder.lora_down.weight"},
      {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj", "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight"},
      {"text_encoder.text_model.encoder.layers.0.mlp.fc1", "lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight"}};
  EXPECT_EQ(got, want);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("lora_unet_ keys (e.g. 'lora_unet_double_blocks_0_img_attn_proj."), std::string::npos) << ignored[0];
  // With a "transformer." key, diffusers' has_peft_state_dict branch comes first: those layers only.
  add(kohya("transformer.transformer_blocks.0.attn.to_q", {2, 8}, {8, 2}));
  const auto peft = pipeline::map_lora_keys(keys, kFluxBfl, facts_of(pipeline::flux_lora_rules, "FLUX.1"), "x.safetensors");
  ASSERT_EQ(peft.size(), 1u);
  EXPECT_EQ(peft[0].module, "transformer_blocks.0.attn.to_q");
}

TEST(MixtureFluxLoraKeys, WhatDiffusersCannotLoadIsRefusedInOneLine) {
  const auto flux = facts_of(pipeline::flux_lora_rules, "FLUX.1");
  const auto why = [&](std::vector<LoraTensorKey> keys) {
    if (keys.front().key.rfind("lora_transformer_", 0) != 0)  // has_mixture needs a lora_transformer_ layer
      for (const auto& k : kohya("lora_transformer_x_embedder", {4, 4}, {8, 4})) keys.push_back(k);
    const std::string w = refusal_in(keys, kFluxBfl, flux);
    EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    EXPECT_EQ(w.rfind("'x.safetensors': ", 0), 0u) << w;
    return w;
  };
  // No alpha: KeyError in _convert.
  EXPECT_NE(why({{"lora_transformer_x_embedder.lora_down.weight", {4, 4}}, {"lora_transformer_x_embedder.lora_up.weight", {8, 4}}})
                .find("has no .alpha"),
            std::string::npos);
  // Another prefix (the converter's assert), an unknown lora_transformer_ module (NotImplementedError),
  // a block number that is none (int()), a CLIP name it leaves over (ValueError).
  EXPECT_NE(why(kohya("lora_te2_text_model_encoder_layers_0_mlp_fc1", {2, 6}, {10, 2})).find("reads only lora_transformer_"),
            std::string::npos);
  EXPECT_NE(why(kohya("lora_transformer_norm1_linear", {4, 8}, {48, 4})).find("names no module the converter knows"),
            std::string::npos);
  EXPECT_NE(why(kohya("lora_transformer_transformer_blocks_x_attn_to_q", {4, 8}, {8, 4})).find("has no block number"),
            std::string::npos);
  EXPECT_NE(why(kohya("lora_te1_text_projection", {2, 6}, {6, 2})).find("leaves unconverted"), std::string::npos);
  // A block layer outside the attention names the block itself (KeyError when diffusers loads it).
  EXPECT_NE(why(kohya("lora_transformer_transformer_blocks_0_norm1_linear", {4, 8}, {48, 4})).find("names the block itself"),
            std::string::npos);
  // Two layers that become one module; transformer layers of different ranks (no defined result).
  auto two = kohya("lora_transformer_x_embedder", {4, 4}, {8, 4});
  for (const auto& k : kohya("lora_transformer_x_embedder_extra", {4, 4}, {8, 4})) two.push_back(k);
  EXPECT_NE(why(two).find("both become transformer.x_embedder"), std::string::npos);
  auto ranks = kohya("lora_transformer_x_embedder", {4, 4}, {8, 4});
  for (const auto& k : kohya("lora_transformer_transformer_blocks_0_attn_to_q", {2, 8}, {8, 2})) ranks.push_back(k);
  EXPECT_NE(why(ranks).find("different ranks"), std::string::npos);
  // A layer for a module the model lacks, and factors that do not fit.
  EXPECT_NE(why(kohya("lora_transformer_transformer_blocks_0_attn_add_v_proj", {4, 8}, {8, 4})).find("match no weight"),
            std::string::npos);
  EXPECT_NE(why(kohya("lora_transformer_transformer_blocks_0_attn_to_q", {4, 7}, {8, 4})).find("do not fit"), std::string::npos);
  // Underscored names without lora_down factors: neither the kohya path nor any other reads them.
  EXPECT_NE(refusal_in({{"lora_transformer_x_embedder.lora_A.weight", {4, 4}}, {"lora_transformer_x_embedder.lora_B.weight", {8, 4}}},
                       kFluxBfl, flux)
                .find("without .lora_down.weight factors"),
            std::string::npos);
}

TEST(LoraRef, PathAndScale) {
  EXPECT_EQ(io::parse_lora_arg("a/b.safetensors:0.8", "--lora"), (io::LoraRef{"a/b.safetensors", 0.8}));
  EXPECT_EQ(io::parse_lora_arg("a/b.safetensors", "--lora"), (io::LoraRef{"a/b.safetensors", 1.0}));
  EXPECT_EQ(io::parse_lora_arg("c:d.safetensors:-1", "--lora"), (io::LoraRef{"c:d.safetensors", -1.0}));
  EXPECT_EQ(io::parse_lora_arg("x:inf", "--lora").path, "x:inf");
  EXPECT_THROW(io::parse_lora_arg(":0.5", "--lora"), InputError);
  const io::LoraSet set = io::lora_set_from_json(json_of(R"([{"path": "s.safetensors", "scale": 0.5}, "t.safetensors:2"])"), "l");
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(io::lora_set_text(set), "<lora:s:0.5> <lora:t:2>");
  EXPECT_THROW(io::lora_set_from_json(json_of(R"([{"path": "s", "weight": 1}])"), "l"), InputError);
  EXPECT_THROW(io::lora_set_from_json(json_of(R"({"path": "s"})"), "l"), InputError);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

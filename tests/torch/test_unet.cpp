// UNet2DConditionModel against diffusers: the fixture pipelines' UNets on the golden
// samples, timesteps and prompt embeddings (including latent sizes that are not multiples
// of 2^num_upsamplers), the config's resolution and its errors.
#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;
using test::pipeline_dir;

json read_config(const std::string& pipeline) {
  std::ifstream in(pipeline_dir(pipeline) + "/unet/config.json");
  return json::parse(in);
}

UNet2DConditionModel load_unet(const std::string& pipeline) {
  const std::string dir = pipeline_dir(pipeline) + "/unet";
  UNet2DConditionModel model(UNetConfig::from_file(dir + "/config.json"));
  load_weights(*model, find_weight_files(dir).files, KeyRenames{}, "unet");
  model->eval();
  return model;
}

// The golden timestep as diffusers got it: a 0-d tensor of the recorded dtype.
at::Tensor golden_timestep(const json& c) {
  return c.at("timestep_dtype") == "int64" ? at::scalar_tensor(c.at("timestep").get<int64_t>(), at::kLong)
                                           : at::scalar_tensor(c.at("timestep").get<double>(), at::kFloat);
}

void expect_matches_diffusers(const std::string& pipeline) {
  c10::InferenceMode guard;
  UNet2DConditionModel model = load_unet(pipeline);
  GoldenFile golden(pipeline, "unet.safetensors");
  at::Tensor context = golden["unet.encoder_hidden_states"];
  json cases = test::golden_cases(pipeline).at("unet").at("cases");
  ASSERT_FALSE(cases.empty());
  for (const json& c : cases) {
    at::Tensor sample = golden[c.at("sample").get<std::string>()];
    at::Tensor out = model->forward(sample, golden_timestep(c), context);
    expect_close(out, golden[c.at("output").get<std::string>()],
                 pipeline + " " + c.at("output").get<std::string>() + " " + c10::str(sample.sizes()));
  }
}

TEST(UNet2DConditionModel, MatchesDiffusersOnTinySD1) { expect_matches_diffusers("tiny-sd1"); }
TEST(UNet2DConditionModel, MatchesDiffusersOnTinySD2V) { expect_matches_diffusers("tiny-sd2v"); }
TEST(UNet2DConditionModel, MatchesDiffusersOnTiny3Down) { expect_matches_diffusers("tiny-3down"); }

TEST(UNet2DConditionModel, TimestepMayBeScalarOrOnePerSample) {
  c10::InferenceMode guard;
  UNet2DConditionModel model = load_unet("tiny-sd1");
  GoldenFile golden("tiny-sd1", "unet.safetensors");
  at::Tensor sample = golden["unet.sample"], context = golden["unet.encoder_hidden_states"];
  at::Tensor scalar = model->forward(sample, at::scalar_tensor(501, at::kLong), context);
  at::Tensor batched = model->forward(sample, at::full({2}, 501, at::kLong), context);
  at::Tensor as_float = model->forward(sample, at::full({1}, 501.0, at::kDouble), context);
  EXPECT_TRUE(at::equal(scalar, batched));
  EXPECT_TRUE(at::equal(scalar, as_float));
  EXPECT_THROW(model->forward(sample, at::full({3}, 501, at::kLong), context), Error);
  EXPECT_THROW(model->forward(sample.slice(1, 0, 3), at::full({2}, 501, at::kLong), context), Error);
}

TEST(UNet2DConditionModel, ConfigResolvesPerBlockSettings) {
  UNetConfig sd1 = UNetConfig::from_json(read_config("tiny-sd1"));
  EXPECT_EQ(sd1.num_attention_heads, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(sd1.layers_per_block, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(sd1.cross_attention_dim, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(sd1.time_embed_dim, 64);
  EXPECT_EQ(sd1.sample_size, (std::array<int64_t, 2>{8, 8}));
  EXPECT_EQ(sd1.num_upsamplers(), 1);

  UNetConfig sd2 = UNetConfig::from_json(read_config("tiny-sd2v"));
  EXPECT_EQ(sd2.num_attention_heads, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(sd2.use_linear_projection);
  EXPECT_TRUE(sd2.upcast_attention);

  UNetConfig three = UNetConfig::from_json(read_config("tiny-3down"));
  EXPECT_EQ(three.sample_size, (std::array<int64_t, 2>{8, 12}));
  EXPECT_EQ(three.down_block_types.size(), 3u);
  EXPECT_EQ(three.num_upsamplers(), 2);

  // An explicit num_attention_heads is the head count and wins over attention_head_dim.
  json j = read_config("tiny-sd2v");
  j["num_attention_heads"] = {4, 8};
  EXPECT_EQ(UNetConfig::from_json(j).num_attention_heads, (std::vector<int64_t>{4, 8}));
  j = read_config("tiny-sd1");
  j.erase("mid_block_type");
  EXPECT_EQ(UNetConfig::from_json(j).mid_block_type, UNetConfig::MidBlockType::kUNetMidBlock2DCrossAttn);
  j["mid_block_type"] = nullptr;
  EXPECT_EQ(UNetConfig::from_json(j).mid_block_type, UNetConfig::MidBlockType::kNone);
  j["sample_size"] = nullptr;
  EXPECT_FALSE(UNetConfig::from_json(j).sample_size.has_value());
}

std::string config_error(const json& j) {
  try {
    UNetConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json with(json j, const std::string& key, json value) {
  j[key] = std::move(value);
  return j;
}

TEST(UNet2DConditionModel, ConfigErrorsNameTheField) {
  const json base = read_config("tiny-3down");
  EXPECT_EQ(config_error(with(base, "down_block_types", {"CrossAttnDownBlock2D", "DownBlock2D", "SimpleCrossAttnDownBlock2D"})),
            "unet config: down_block_types[2] 'SimpleCrossAttnDownBlock2D' is not supported; supported: "
            "CrossAttnDownBlock2D, DownBlock2D");
  EXPECT_EQ(config_error(with(base, "up_block_types", {"UpBlock2D", "AttnUpBlock2D", "CrossAttnUpBlock2D"})),
            "unet config: up_block_types[1] 'AttnUpBlock2D' is not supported; supported: CrossAttnUpBlock2D, UpBlock2D");
  EXPECT_EQ(config_error(with(base, "mid_block_type", "UNetMidBlock2DSimpleCrossAttn")),
            "unet config: mid_block_type 'UNetMidBlock2DSimpleCrossAttn' is not supported; supported: "
            "UNetMidBlock2DCrossAttn, UNetMidBlock2D, null");
  EXPECT_EQ(config_error(with(base, "act_fn", "gelu")),
            "unet config: act_fn 'gelu' is not supported; supported: silu, swish");
  EXPECT_EQ(config_error(with(base, "resnet_time_scale_shift", "scale_shift")),
            "unet config: resnet_time_scale_shift 'scale_shift' is not supported; supported: default");
  EXPECT_EQ(config_error(with(base, "time_embedding_type", "fourier")),
            "unet config: time_embedding_type 'fourier' is not supported; supported: positional");
  EXPECT_EQ(config_error(with(base, "class_embed_type", "timestep")),
            "unet config: class_embed_type 'timestep' is not supported; supported: null");
  EXPECT_EQ(config_error(with(base, "addition_embed_type", "text_image")),
            "unet config: addition_embed_type 'text_image' is not supported; supported: text_time, null");
  // SDXL's text_time needs the width of what it embeds.
  EXPECT_EQ(config_error(with(base, "addition_embed_type", "text_time")),
            "unet config: projection_class_embeddings_input_dim is required with addition_embed_type text_time "
            "(pooled width + 6 * addition_time_embed_dim)");
  EXPECT_EQ(config_error(with(with(with(base, "addition_embed_type", "text_time"), "addition_time_embed_dim", 8),
                              "projection_class_embeddings_input_dim", 48)),
            "unet config: projection_class_embeddings_input_dim = 48 leaves no room for the pooled text embedding "
            "beside 6 * addition_time_embed_dim = 48");
  EXPECT_EQ(config_error(with(base, "dual_cross_attention", true)),
            "unet config: dual_cross_attention true is not supported; supported: false");
  EXPECT_EQ(config_error(with(base, "layers_per_block", {1, 2})),
            "unet config: layers_per_block must be an integer or a list of 3 (one per down block), got [1,2]");
  EXPECT_EQ(config_error(with(base, "transformer_layers_per_block", json::array({json::array({1, 2}), 1, 1}))),
            "unet config: transformer_layers_per_block with nested lists (asymmetric up blocks, "
            "reverse_transformer_layers_per_block) is not supported; use an integer or one integer per down block");
  EXPECT_EQ(config_error(with(base, "block_out_channels", {8, 16})),
            "unet config: block_out_channels must have one entry per down block (3), got 2");
  EXPECT_EQ(config_error(with(base, "up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D"})),
            "unet config: up_block_types must have as many entries as down_block_types (3), got 2");
  EXPECT_EQ(config_error(with(base, "attention_head_dim", 3)),
            "unet config: block_out_channels[0] = 8 must be divisible by the head count attention_head_dim[0] = 3");
  EXPECT_EQ(config_error(with(base, "norm_num_groups", 3)),
            "unet config: block_out_channels[0] = 8 must be divisible by norm_num_groups = 3");
  EXPECT_EQ(config_error(with(base, "norm_eps", "1e-5")), "unet config: norm_eps must be a number, got '1e-5'");

  const std::string missing = pipeline_dir("tiny-sd1") + "/no-such-unet/config.json";
  try {
    UNetConfig::from_file(missing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "unet config: '" + missing + "': cannot read: No such file or directory");
  }
}

TEST(UNet2DConditionModel, ParameterNamesAreTheCheckpointKeys) {
  UNet2DConditionModel model(UNetConfig::from_json(read_config("tiny-sd1")));
  auto params = model->named_parameters();
  for (const char* key : {"conv_in.weight", "time_embedding.linear_1.weight", "time_embedding.linear_2.bias",
                          "down_blocks.0.resnets.0.norm1.weight", "down_blocks.0.resnets.1.time_emb_proj.weight",
                          "down_blocks.0.attentions.1.proj_in.weight",
                          "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
                          "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_out.0.bias",
                          "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj.weight",
                          "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.2.weight",
                          "down_blocks.0.downsamplers.0.conv.weight", "mid_block.resnets.1.conv2.weight",
                          "mid_block.attentions.0.norm.bias", "up_blocks.0.resnets.2.conv_shortcut.weight",
                          "up_blocks.0.upsamplers.0.conv.weight", "up_blocks.1.attentions.2.proj_out.bias",
                          "conv_norm_out.weight", "conv_out.bias"})
    EXPECT_TRUE(params.contains(key)) << key;
  EXPECT_FALSE(params.contains("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.bias"));
  EXPECT_FALSE(params.contains("down_blocks.1.attentions.0.norm.weight"));
  EXPECT_FALSE(params.contains("down_blocks.1.downsamplers.0.conv.weight"));
}

TEST(UNet2DConditionModel, OptionalPartsBuildAndRun) {
  c10::InferenceMode guard;
  json j = read_config("tiny-sd1");
  j["time_cond_proj_dim"] = 5;
  j["mid_block_type"] = "UNetMidBlock2D";
  j["only_cross_attention"] = {true, false};
  j["transformer_layers_per_block"] = {2, 1};
  UNet2DConditionModel model(UNetConfig::from_json(j));
  auto params = model->named_parameters();
  EXPECT_EQ(params["time_embedding.cond_proj.weight"].sizes(), (std::vector<int64_t>{16, 5}));
  EXPECT_EQ(params["down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_k.weight"].sizes(),
            (std::vector<int64_t>{16, 32}));
  EXPECT_TRUE(params.contains("down_blocks.0.attentions.0.transformer_blocks.1.norm3.weight"));
  EXPECT_TRUE(params.contains("mid_block.resnets.0.conv1.weight"));
  EXPECT_FALSE(params.contains("mid_block.resnets.1.conv1.weight"));
  // Modules are built uninitialised (the loader fills them), so give the parameters values.
  at::manual_seed(0);
  for (at::Tensor& p : model->parameters()) p.normal_(0.0, 0.05);
  at::Tensor out = model->forward(at::randn({1, 4, 6, 10}), at::scalar_tensor(10), at::randn({1, 7, 32}),
                                  at::randn({1, 5}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 4, 6, 10}));
  EXPECT_TRUE(out.isfinite().all().item<bool>());

  j["mid_block_type"] = nullptr;
  UNet2DConditionModel no_mid(UNetConfig::from_json(j));
  EXPECT_EQ(no_mid->forward(at::randn({1, 4, 3, 5}), at::scalar_tensor(10), at::randn({1, 7, 32})).sizes(),
            (std::vector<int64_t>{1, 4, 3, 5}));
  EXPECT_THROW(load_unet("tiny-sd1")->forward(at::randn({1, 4, 8, 8}), at::scalar_tensor(1), at::randn({1, 7, 32}),
                                              at::randn({1, 5})),
               Error);
}

TEST(UNet2DConditionModel, RunsInHalfAndBFloat16OnTheCpu) {
  c10::InferenceMode guard;
  UNet2DConditionModel model = load_unet("tiny-3down");
  GoldenFile golden("tiny-3down", "unet.safetensors");
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    model->to(dtype);
    for (const char* name : {"sample", "sample_odd"}) {
      at::Tensor sample = golden[std::string("unet.") + name].to(dtype);
      at::Tensor out = model->forward(sample, at::scalar_tensor(301, at::kLong),
                                      golden["unet.encoder_hidden_states"].to(dtype));
      EXPECT_EQ(out.scalar_type(), dtype);
      if (std::string(name) == "sample_odd")
        expect_close(out, golden["unet.out_odd_t301"], std::string("tiny-3down cpu ") + c10::toString(dtype),
                     dtype == at::kHalf ? 1e-2 : 5e-2);
    }
  }
}

TEST(UNet2DConditionModel, RunsInEveryPrecisionOnTheGpu_CUDA) {
  c10::InferenceMode guard;
  // Full fp32 on the GPU for the parity bound (cuDNN's default TF32 convolutions are not).
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);
  for (const std::string& pipeline : test::fixture_pipelines()) {
    UNet2DConditionModel model = load_unet(pipeline);
    GoldenFile golden(pipeline, "unet.safetensors");
    for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      model->to(at::kCUDA, dtype);
      at::Tensor context = golden["unet.encoder_hidden_states"].to(at::kCUDA, dtype);
      for (const json& c : test::golden_cases(pipeline).at("unet").at("cases")) {
        at::Tensor sample = golden[c.at("sample").get<std::string>()].to(at::kCUDA, dtype);
        at::Tensor out = model->forward(sample, golden_timestep(c).to(at::kCUDA), context);
        EXPECT_EQ(out.scalar_type(), dtype);
        double tolerance = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 1e-2 : 5e-2;
        expect_close(out, golden[c.at("output").get<std::string>()],
                     pipeline + " cuda " + c10::toString(dtype) + " " + c.at("output").get<std::string>(), tolerance);
      }
    }
  }
  at::globalContext().setAllowTF32CuDNN(tf32);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

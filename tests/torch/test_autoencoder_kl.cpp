// AutoencoderKL against diffusers: decode and encode on the fixture pipelines' VAEs
// (tiny-3down's file carries the legacy attention names), tiled as diffusers' enable_tiling()
// decodes and encodes, the config and its errors.
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;
using test::pipeline_dir;

json read_config(const std::string& pipeline) {
  std::ifstream in(pipeline_dir(pipeline) + "/vae/config.json");
  return json::parse(in);
}

AutoencoderKL load_vae(const std::string& pipeline) {
  const std::string dir = pipeline_dir(pipeline) + "/vae";
  AutoencoderKL model(AutoencoderKLConfig::from_file(dir + "/config.json"));
  load_weights(*model, find_weight_files(dir).files, find_model_class("AutoencoderKL")->renames, "vae");
  model->eval();
  return model;
}

void expect_matches_diffusers(const std::string& pipeline) {
  c10::InferenceMode guard;
  AutoencoderKL vae = load_vae(pipeline);
  GoldenFile golden(pipeline, "vae.safetensors");
  expect_close(vae->decode(golden["vae.decode.in"]), golden["vae.decode.out"], pipeline + " vae decode");
  LatentDist dist = vae->encode(golden["vae.encode.in"]);
  expect_close(dist.mean, golden["vae.encode.mean"], pipeline + " vae encode mean");
  expect_close(dist.logvar, golden["vae.encode.logvar"], pipeline + " vae encode logvar");
}

TEST(AutoencoderKL, MatchesDiffusersOnTinySD1) { expect_matches_diffusers("tiny-sd1"); }
TEST(AutoencoderKL, MatchesDiffusersOnTinySD2V) { expect_matches_diffusers("tiny-sd2v"); }
TEST(AutoencoderKL, MatchesDiffusersOnTiny3DownWithLegacyAttentionNames) {
  auto file = io::SafetensorsFile::open(find_weight_files(pipeline_dir("tiny-3down") + "/vae").files.at(0));
  ASSERT_NE(file->find("decoder.mid_block.attentions.0.query.weight"), nullptr) << "the fixture should be legacy";
  expect_matches_diffusers("tiny-3down");
}

// Issue 26 item 5: make_vae_tiling_goldens.py's tiling/vae.safetensors, diffusers' AutoencoderKL with
// enable_tiling() on a latent and an image over the tile (2 x 2 tiles each way): tiled_decode, and
// _tiled_encode's latent distribution. tiny-3down's VAE runs quant_conv and post_quant_conv per
// tile, tiny-flux-dev's has neither (and a scale factor of 1).
void expect_tiled_matches_diffusers(const std::string& pipeline) {
  c10::InferenceMode guard;
  test::OneThread one_thread;  // as recorded
  AutoencoderKL vae = load_vae(pipeline);
  GoldenFile golden(pipeline, "tiling/vae.safetensors");
  const at::Tensor z = golden["decode.in"], x = golden["encode.in"];
  ASSERT_GT(z.size(2), vae->tile_latent_min_size());
  ASSERT_GT(x.size(2), vae->tile_sample_min_size());
  vae->set_tiling(true);
  expect_close(vae->decode(z), golden["decode.out"], pipeline + " tiled decode");
  const LatentDist dist = vae->encode(x);
  expect_close(dist.mean, golden["encode.mean"], pipeline + " tiled encode mean");
  expect_close(dist.logvar, golden["encode.logvar"], pipeline + " tiled encode logvar");
  // The goldens are the tiles' own: the whole-image VAE is further from them than the bound.
  vae->set_tiling(false);
  EXPECT_GT(test::relative_error(vae->decode(z), golden["decode.out"]), 10 * test::kParityTolerance);
  EXPECT_GT(test::relative_error(vae->encode(x).mean, golden["encode.mean"]), 10 * test::kParityTolerance);
}

TEST(AutoencoderKLTiling, TiledDecodeAndEncodeMatchDiffusersOnTiny3Down) { expect_tiled_matches_diffusers("tiny-3down"); }
TEST(AutoencoderKLTiling, TiledDecodeAndEncodeMatchDiffusersOnTinyFluxDev) {
  expect_tiled_matches_diffusers("tiny-flux-dev");
}

TEST(AutoencoderKLTiling, TileSizesAreDiffusersDefaults) {
  EXPECT_EQ(AutoencoderKL(AutoencoderKLConfig::from_json(read_config("tiny-sd1")))->tile_latent_min_size(), 8);
  EXPECT_EQ(AutoencoderKL(AutoencoderKLConfig::from_json(read_config("tiny-sd1")))->tile_sample_min_size(), 64);
  EXPECT_EQ(AutoencoderKL(AutoencoderKLConfig::from_json(read_config("tiny-3down")))->tile_latent_min_size(), 8);
  EXPECT_EQ(AutoencoderKL(AutoencoderKLConfig::from_json(read_config("tiny-flux-dev")))->tile_latent_min_size(), 32);
  // SD1.5's VAE: 512 / 2^3
  json sd15 = read_config("tiny-sd1");
  sd15["sample_size"] = 512;
  EXPECT_EQ(AutoencoderKL(AutoencoderKLConfig::from_json(sd15))->tile_latent_min_size(), 64);
}

// diffusers tiles only a latent over tile_latent_min_size (an image over tile_sample_min_size) in
// height or width: at the tile size and under it, tiling on decodes and encodes as tiling off, bit for bit.
TEST(AutoencoderKLTiling, AtOrUnderTheTileSizeTilingChangesNothing) {
  c10::InferenceMode guard;
  AutoencoderKL vae = load_vae("tiny-3down");  // tiles of 8 latents, 32 pixels
  at::manual_seed(0);
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 4, 8, 8}, {2, 4, 8, 5}, {1, 4, 3, 8}}) {
    const at::Tensor z = at::randn(shape);
    vae->set_tiling(false);
    const at::Tensor whole = vae->decode(z);
    vae->set_tiling(true);
    EXPECT_TRUE(at::equal(vae->decode(z), whole)) << z.sizes();
  }
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 3, 32, 32}, {2, 3, 32, 20}}) {
    const at::Tensor x = at::rand(shape) * 2 - 1;
    vae->set_tiling(false);
    const LatentDist whole = vae->encode(x);
    vae->set_tiling(true);
    const LatentDist tiled = vae->encode(x);
    EXPECT_TRUE(at::equal(tiled.mean, whole.mean)) << x.sizes();
    EXPECT_TRUE(at::equal(tiled.logvar, whole.logvar)) << x.sizes();
  }
  // One latent (one pixel) past the tile in either dimension: tiled, and so another result.
  const at::Tensor z = at::randn({1, 4, 9, 8});
  vae->set_tiling(false);
  const at::Tensor whole = vae->decode(z);
  vae->set_tiling(true);
  const at::Tensor tiled = vae->decode(z);
  EXPECT_EQ(tiled.sizes(), whole.sizes());
  EXPECT_FALSE(at::equal(tiled, whole));
  const at::Tensor x = at::rand({1, 3, 32, 33}) * 2 - 1;
  const at::Tensor tiled_mean = vae->encode(x).mean;
  vae->set_tiling(false);
  EXPECT_FALSE(at::equal(tiled_mean, vae->encode(x).mean));
}

TEST(AutoencoderKLTiling, AListSampleSizeIsRefusedAsDiffusersFailsOnIt) {
  json j = read_config("tiny-3down");
  j["sample_size"] = {32, 48};
  AutoencoderKL vae(AutoencoderKLConfig::from_json(j));
  try {
    vae->set_tiling(true);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "vae config: sample_size is a list, on which diffusers' VAE tiling fails; run without --vae-tiling");
  }
  EXPECT_FALSE(vae->tiling());
  vae->set_tiling(false);
}

TEST(AutoencoderKL, ConfigRecordsThePipelineSettings) {
  AutoencoderKLConfig sd1 = AutoencoderKLConfig::from_json(read_config("tiny-sd1"));
  EXPECT_EQ(sd1.scale_factor(), 8);
  EXPECT_DOUBLE_EQ(sd1.scaling_factor, 0.18215);
  EXPECT_FALSE(sd1.shift_factor.has_value());
  EXPECT_TRUE(sd1.force_upcast);
  EXPECT_EQ(AutoencoderKLConfig::from_json(read_config("tiny-3down")).scale_factor(), 4);
  EXPECT_EQ(AutoencoderKLConfig::from_json(read_config("tiny-sd2v")).scale_factor(), 2);

  json j = read_config("tiny-sd1");
  j["shift_factor"] = 0.1159;
  j["force_upcast"] = false;
  j["latents_mean"] = {0.1, 0.2, 0.3, 0.4};
  AutoencoderKLConfig flux_like = AutoencoderKLConfig::from_json(j);
  EXPECT_DOUBLE_EQ(flux_like.shift_factor.value(), 0.1159);
  EXPECT_FALSE(flux_like.force_upcast);
  EXPECT_EQ(flux_like.latents_mean->size(), 4u);
}

TEST(AutoencoderKL, OptionalConvsAndMidAttentionFollowTheConfig) {
  c10::InferenceMode guard;
  json j = read_config("tiny-3down");
  j["use_quant_conv"] = false;
  j["use_post_quant_conv"] = false;
  j["mid_block_add_attention"] = false;
  AutoencoderKL vae(AutoencoderKLConfig::from_json(j));
  auto params = vae->named_parameters();
  EXPECT_FALSE(params.contains("quant_conv.weight"));
  EXPECT_FALSE(params.contains("post_quant_conv.weight"));
  EXPECT_FALSE(params.contains("decoder.mid_block.attentions.0.to_q.weight"));
  EXPECT_TRUE(params.contains("decoder.mid_block.resnets.1.conv1.weight"));
  EXPECT_EQ(vae->decode(at::randn({1, 4, 3, 5})).sizes(), (std::vector<int64_t>{1, 3, 12, 20}));
  EXPECT_EQ(vae->encode(at::randn({1, 3, 16, 12})).mean.sizes(), (std::vector<int64_t>{1, 4, 4, 3}));

  AutoencoderKL full(AutoencoderKLConfig::from_json(read_config("tiny-3down")));
  auto full_params = full->named_parameters();
  for (const char* key : {"quant_conv.weight", "post_quant_conv.bias", "decoder.mid_block.attentions.0.group_norm.weight",
                          "decoder.mid_block.attentions.0.to_q.bias", "decoder.mid_block.attentions.0.to_out.0.weight",
                          "encoder.down_blocks.0.downsamplers.0.conv.weight", "decoder.up_blocks.0.upsamplers.0.conv.weight",
                          "decoder.up_blocks.2.resnets.1.conv2.weight", "encoder.conv_out.weight"})
    EXPECT_TRUE(full_params.contains(key)) << key;
  EXPECT_FALSE(full_params.contains("decoder.up_blocks.2.resnets.2.conv2.weight"));  // layers_per_block 1: 2 resnets
  EXPECT_FALSE(full_params.contains("decoder.up_blocks.2.upsamplers.0.conv.weight"));
  EXPECT_THROW(full->decode(at::randn({1, 3, 4, 4})), Error);
}

std::string config_error(const json& j) {
  try {
    AutoencoderKLConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AutoencoderKL, ConfigErrorsNameTheField) {
  json j = read_config("tiny-3down");
  j["down_block_types"][1] = "AttnDownEncoderBlock2D";
  EXPECT_EQ(config_error(j), "vae config: down_block_types[1] 'AttnDownEncoderBlock2D' is not supported; supported: "
                             "DownEncoderBlock2D");
  j = read_config("tiny-3down");
  j["act_fn"] = "mish";
  EXPECT_EQ(config_error(j), "vae config: act_fn 'mish' is not supported; supported: silu, swish");
  j = read_config("tiny-3down");
  j["block_out_channels"] = {4, 8};
  EXPECT_EQ(config_error(j), "vae config: block_out_channels must have one entry per down and up block (3 down, 3 up), got 2");
  j = read_config("tiny-3down");
  j["norm_num_groups"] = 3;
  EXPECT_EQ(config_error(j), "vae config: block_out_channels[0] = 4 must be divisible by norm_num_groups = 3");
}

TEST(AutoencoderKL, RunsInHalfAndBFloat16OnTheCpu) {
  c10::InferenceMode guard;
  AutoencoderKL vae = load_vae("tiny-3down");
  GoldenFile golden("tiny-3down", "vae.safetensors");
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    vae->to(dtype);
    const double tolerance = dtype == at::kHalf ? 1e-2 : 5e-2;
    const std::string what = std::string("tiny-3down cpu ") + c10::toString(dtype);
    at::Tensor image = vae->decode(golden["vae.decode.in"].to(dtype));
    EXPECT_EQ(image.scalar_type(), dtype);
    expect_close(image, golden["vae.decode.out"], what + " decode", tolerance);
    expect_close(vae->encode(golden["vae.encode.in"].to(dtype)).mean, golden["vae.encode.mean"],
                 what + " encode mean", tolerance);
  }
}

TEST(AutoencoderKL, RunsInEveryPrecisionOnTheGpu_CUDA) {
  c10::InferenceMode guard;
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);
  for (const std::string& pipeline : test::fixture_pipelines()) {
    AutoencoderKL vae = load_vae(pipeline);
    GoldenFile golden(pipeline, "vae.safetensors");
    for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      vae->to(at::kCUDA, dtype);
      double tolerance = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 1e-2 : 5e-2;
      std::string what = pipeline + " cuda " + c10::toString(dtype);
      at::Tensor image = vae->decode(golden["vae.decode.in"].to(at::kCUDA, dtype));
      EXPECT_EQ(image.scalar_type(), dtype);
      expect_close(image, golden["vae.decode.out"], what + " decode", tolerance);
      expect_close(vae->encode(golden["vae.encode.in"].to(at::kCUDA, dtype)).mean, golden["vae.encode.mean"],
                   what + " encode mean", tolerance);
    }
  }
  at::globalContext().setAllowTF32CuDNN(tf32);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// AutoencoderKLQwenImage (Qwen-Image's VAE) against diffusers 0.36.0, on the two tiny random VAEs of
// tools/fixtures/make_qwen_image_vae_goldens.py (diffusers' own dummy and another layout): one-frame
// decodes of a batch of 2 non-square latents in float32 and in bfloat16, loaded the way the pipeline
// loads them (through the model-class table: built on the meta device, every key checked, then
// filled); one-frame encodes (make_qwen_image_vae_encode_goldens.py, issue 29). Plus the one-frame
// equivalences the module rests on, and the config's one-line errors.
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::expect_close;
using test::GoldenFile;
using test::model_fixture_dir;

// The goldens were recorded on one CPU thread; on one thread dpinfer decodes bit for bit as
// diffusers does, in both dtypes, on every case (max |diff| 0). On two threads float32 differs by
// up to 2e-6 (relative L2 9e-7: oneDNN's float32 convolutions sum in a thread-dependent order) and
// bfloat16 still not at all. The bounds leave room for other machines: float32 the parity bound,
// bfloat16 a few bfloat16 rounding steps (2^-8) of relative error.
constexpr double kBf16Tolerance = 1e-2;

// Not measured (no GPU here): cuDNN's bfloat16 convolutions round differently from the CPU's, so
// the GPU run gets AutoencoderKL's GPU bound.
constexpr double kBf16GpuTolerance = 5e-2;

Component vae_component(const std::string& name) {
  return test::fixture_component(name, "vae", ComponentRole::kVae, "AutoencoderKLQwenImage");
}

json golden_cases(const std::string& name) { return io::read_json_file(model_fixture_dir(name) + ".golden/cases.json"); }

GoldenFile golden_file(const std::string& name) { return GoldenFile(model_fixture_dir(name) + ".golden/vae.safetensors"); }

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

const std::vector<std::string>& test_models() {
  static const std::vector<std::string> names{"tiny-qwen-image-vae", "tiny-qwen-image-vae-alt"};
  return names;
}

class QwenImageVae : public ::testing::TestWithParam<std::string> {};

TEST_P(QwenImageVae, DecodeMatchesDiffusers) {
  c10::InferenceMode guard;
  test::OneThread one_thread;
  const std::string name = GetParam();
  const GoldenFile golden = golden_file(name);
  const json cases = golden_cases(name).at("cases");
  ASSERT_FALSE(cases.empty());
  const int64_t scale = golden_cases(name).at("scale_factor").get<int64_t>();
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto vae = load_component_as<AutoencoderKLQwenImageImpl>(vae_component(name), at::TensorOptions().dtype(dtype));
    ASSERT_TRUE(vae);
    EXPECT_EQ(vae->config().scale_factor(), scale);
    for (const json& c : cases) {
      const at::Tensor latents = golden[c.at("latents").get<std::string>()];
      const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
      const at::Tensor image = vae->decode(latents.to(dtype));
      ASSERT_EQ(image.scalar_type(), dtype);
      ASSERT_EQ(image.sizes().vec(),
                (std::vector<int64_t>{latents.size(0), 3, latents.size(2) * scale, latents.size(3) * scale}));
      const std::string what = name + " " + c.at("name").get<std::string>() + " " + dtype_name;
      expect_close(image, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16Tolerance);
      std::printf("  %-58s max |diff| %.3e, bit-identical: %s\n", what.c_str(), max_abs(image, expected),
                  at::equal(image, expected) ? "yes" : "no");
      EXPECT_LE(image.abs().max().item<double>(), 1.0) << what << ": decode clamps to [-1, 1]";
    }
  }
}

// Encode, as the img2img pipeline calls it: the image as VaeImageProcessor leaves it (a channels-last view of
// the HWC array over 255, 2x - 1), in the run dtype. Only tiny-qwen-image-vae: diffusers cannot encode with the
// alt VAE's attn_scales, and dpinfer refuses to.
TEST(QwenImageVaeEncode, MeanAndLogVarianceMatchDiffusers) {
  c10::InferenceMode guard;
  test::OneThread one_thread;
  const std::string dir = model_fixture_dir("tiny-qwen-image-vae") + ".golden/";
  const GoldenFile golden(dir + "encode.safetensors");
  const json cases = io::read_json_file(dir + "encode.json").at("cases");
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto vae = load_component_as<AutoencoderKLQwenImageImpl>(vae_component("tiny-qwen-image-vae"),
                                                             at::TensorOptions().dtype(dtype));
    for (const json& c : cases) {
      const at::Tensor pixels = golden[c.at("pixels").get<std::string>()];  // uint8 [H, W, 3]
      const at::Tensor x = (2.0 * (pixels.to(at::kFloat) / 255.0f).unsqueeze(0).permute({0, 3, 1, 2}) - 1.0).to(dtype);
      const LatentDist dist = vae->encode(x);
      const std::string what = "encode " + c.at("pixels").get<std::string>() + " " + dtype_name;
      const at::Tensor mean = golden[c.at("outputs").at(dtype_name).at("mean").get<std::string>()];
      const at::Tensor logvar = golden[c.at("outputs").at(dtype_name).at("logvar").get<std::string>()];
      std::printf("  %-30s mean max |diff| %.3e, logvar %.3e\n", what.c_str(), max_abs(dist.mean, mean),
                  max_abs(dist.logvar, logvar));
      if (dtype == at::kBFloat16) {  // bit for bit
        EXPECT_TRUE(at::equal(dist.mean, mean)) << what;
        EXPECT_TRUE(at::equal(dist.logvar, logvar)) << what;
      } else {
        // float32: within about 6e-7 (relative 1e-7). conv3d over two zero frames and dpinfer's conv2d of the kernel's
        // last slice sum the same products, but oneDNN blocks the 3D and the 2D reductions differently in float32.
        expect_close(dist.mean, mean, what + " mean", test::kParityTolerance);
        expect_close(dist.logvar, logvar, what + " logvar", test::kParityTolerance);
      }
    }
  }
  auto alt = load_component_as<AutoencoderKLQwenImageImpl>(vae_component("tiny-qwen-image-vae-alt"),
                                                           at::TensorOptions().dtype(at::kFloat));
  EXPECT_THROW(alt->encode(at::zeros({1, 3, 16, 16})), InputError);
}

TEST_P(QwenImageVae, ModelClassRowLoadsEncoderAndDecoderStrictly) {
  const ModelClass* row = find_model_class("AutoencoderKLQwenImage");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kVae);
  EXPECT_EQ(row->library, "diffusers");
  const Component c = vae_component(GetParam());
  const nlohmann::ordered_json facts = row->facts(c.config);
  EXPECT_EQ(facts.at("z_dim").get<int64_t>(), c.config.at("z_dim").get<int64_t>());
  EXPECT_EQ(facts.at("scale_factor").get<int64_t>(), golden_cases(GetParam()).at("scale_factor").get<int64_t>());
  EXPECT_EQ(facts.at("latents_std").get<std::vector<double>>(), c.config.at("latents_std").get<std::vector<double>>());

  auto module = row->build(c.config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const std::vector<std::string> files = find_weight_files(c.path).files;
  // Every key of the file, 5D convolution shapes included: the encoder's and quant_conv's too.
  const KeyReport report = match_keys(*module, files, row->renames, "vae");
  EXPECT_TRUE(report.ok()) << key_mismatch_message(report, files, "vae");
  EXPECT_EQ(report.matched, module->named_parameters().size());
  EXPECT_TRUE(report.unexpected.empty());

  const auto params = module->named_parameters();
  const AutoencoderKLQwenImageConfig config = AutoencoderKLQwenImageConfig::from_json(c.config);
  const int64_t top = config.base_dim * config.dim_mult.back();
  EXPECT_EQ(params["decoder.conv_in.weight"].sizes().vec(), (std::vector<int64_t>{top, config.z_dim, 3, 3, 3}));
  EXPECT_EQ(params["post_quant_conv.weight"].sizes().vec(), (std::vector<int64_t>{config.z_dim, config.z_dim, 1, 1, 1}));
  EXPECT_EQ(params["decoder.mid_block.attentions.0.norm.gamma"].sizes().vec(), (std::vector<int64_t>{top, 1, 1}));
  EXPECT_EQ(params["decoder.norm_out.gamma"].sizes().vec(), (std::vector<int64_t>{config.base_dim, 1, 1, 1}));
  EXPECT_TRUE(params.contains("decoder.up_blocks.0.upsamplers.0.resample.1.weight"));
  // upsample3d where temperal_downsample, reversed, is true; the last up block has no upsampler.
  const size_t levels = config.dim_mult.size();
  for (size_t i = 0; i + 1 < levels; ++i) {
    const bool temporal = config.temperal_downsample[levels - 2 - i];
    EXPECT_EQ(params.contains("decoder.up_blocks." + std::to_string(i) + ".upsamplers.0.time_conv.weight"), temporal)
        << i;
  }
  EXPECT_FALSE(params.contains("decoder.up_blocks." + std::to_string(levels - 1) + ".upsamplers.0.resample.1.weight"));
  EXPECT_EQ(params["encoder.conv_out.weight"].sizes().vec(),
            (std::vector<int64_t>{2 * config.z_dim, config.base_dim * config.dim_mult.back(), 3, 3, 3}));
  EXPECT_EQ(params["quant_conv.weight"].sizes().vec(), (std::vector<int64_t>{2 * config.z_dim, 2 * config.z_dim, 1, 1, 1}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QwenImageVae, ::testing::ValuesIn(test_models()),
                         dpinfer::test::FixtureParamName());

TEST(QwenImageVaeParts, CausalConvOnOneFrameIsTheConv3dOfItsZeroPaddedInput) {
  c10::InferenceMode guard;
  at::manual_seed(0);
  QwenImageCausalConv3d conv(5, 7, 3, 3, 1, 1, at::TensorOptions().dtype(at::kFloat));
  conv->weight.normal_();
  conv->bias.normal_();
  const at::Tensor x = at::randn({2, 5, 4, 6});
  // diffusers: F.pad(x[:, :, None], (1, 1, 1, 1, 2, 0)), then conv3d: two zero frames in front.
  const at::Tensor padded = at::constant_pad_nd(x.unsqueeze(2), {1, 1, 1, 1, 2, 0});
  const at::Tensor expected = at::conv3d(padded, conv->weight, conv->bias).squeeze(2);
  EXPECT_TRUE(at::allclose(conv(x), expected, 1e-5, 1e-5)) << max_abs(conv(x), expected);
  // A channels-last input (the attention block's output) gives the same bits as a contiguous one.
  EXPECT_TRUE(at::equal(conv(x.contiguous(at::MemoryFormat::ChannelsLast)), conv(x)));
}

TEST(QwenImageVaeParts, NearestExactUpsamplingInBFloat16EqualsDiffusersFloat32Route) {
  c10::InferenceMode guard;
  at::manual_seed(0);
  const at::Tensor x = at::randn({2, 3, 5, 7}).to(at::kBFloat16);
  const at::Tensor native = at::_upsample_nearest_exact2d(x, {10, 14}, 2.0, 2.0);
  const at::Tensor via_float = at::_upsample_nearest_exact2d(x.to(at::kFloat), {10, 14}, 2.0, 2.0).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(native, via_float));
  EXPECT_TRUE(at::equal(native.index({at::indexing::Slice(), at::indexing::Slice(), 3, 5}), x.index({at::indexing::Slice(), at::indexing::Slice(), 1, 2})));
}

TEST(QwenImageVaeParts, DecodeTakesOneFrameOfZDimLatents) {
  c10::InferenceMode guard;
  AutoencoderKLQwenImage vae(AutoencoderKLQwenImageConfig::from_json(vae_component("tiny-qwen-image-vae").config));
  for (auto& p : vae->parameters()) p.normal_(0.0, 0.1);
  EXPECT_EQ(vae->decode(at::randn({1, 4, 3, 5})).sizes().vec(), (std::vector<int64_t>{1, 3, 12, 20}));
  EXPECT_THROW(vae->decode(at::randn({1, 4, 1, 3, 5})), Error);  // diffusers' 5D layout
  EXPECT_THROW(vae->decode(at::randn({1, 16, 3, 5})), Error);
}

// Issue 26 item 5: diffusers' enable_tiling() on AutoencoderKLQwenImage, 256-pixel tiles every 192
// (64 and 48 latents on tiny-qwen-image-vae, scale factor 4). The whole pipeline is held to
// diffusers' tiled images in PipelineParity (tiny-qwen-image.golden/tiling); here the dispatch.
TEST(QwenImageVaeTiling, AtOrUnderTheTileSizeTilingChangesNothing) {
  c10::InferenceMode guard;
  auto vae = load_component_as<AutoencoderKLQwenImageImpl>(vae_component("tiny-qwen-image-vae"), at::TensorOptions());
  ASSERT_EQ(vae->config().scale_factor(), 4);
  at::manual_seed(0);
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 4, 64, 64}, {1, 4, 8, 64}, {2, 4, 64, 3}}) {
    const at::Tensor z = at::randn(shape);
    vae->set_tiling(false);
    const at::Tensor whole = vae->decode(z);
    vae->set_tiling(true);
    EXPECT_TRUE(at::equal(vae->decode(z), whole)) << z.sizes();
  }
}

TEST(QwenImageVaeTiling, OneTileIsTheWholeDecoderUnclampedAndMoreAreBlended) {
  c10::InferenceMode guard;
  auto vae = load_component_as<AutoencoderKLQwenImageImpl>(vae_component("tiny-qwen-image-vae"), at::TensorOptions());
  at::manual_seed(1);
  // Under the 48-latent stride: one tile, the decoder on the whole latent, not clamped (diffusers'
  // tiled_decode has no clamp).
  const at::Tensor small = at::randn({1, 4, 40, 24}) * 3;
  vae->set_tiling(false);
  const at::Tensor whole = vae->decode(small);
  const at::Tensor one_tile = vae->tiled_decode(small);
  EXPECT_TRUE(at::equal(one_tile.clamp(-1, 1), whole));
  EXPECT_GT(one_tile.abs().max().item<double>(), 1.0) << "the test wants values past [-1, 1]";
  // Over the tile both ways (66 latents: tiles at 0 and 48): the image size, another image.
  const at::Tensor large = at::randn({1, 4, 66, 70});
  const at::Tensor untiled = vae->decode(large);
  vae->set_tiling(true);
  const at::Tensor tiled = vae->decode(large);
  EXPECT_EQ(tiled.sizes().vec(), (std::vector<int64_t>{1, 3, 264, 280}));
  EXPECT_FALSE(at::equal(tiled.clamp(-1, 1), untiled));
  // The first tile's top-left 192 x 192, which no blend touches, is the decode of the first
  // tile's latent alone (clamped there).
  vae->set_tiling(false);
  const at::Tensor first = vae->decode(large.slice(2, 0, 64).slice(3, 0, 64));
  EXPECT_TRUE(at::equal(tiled.slice(2, 0, 192).slice(3, 0, 192).clamp(-1, 1), first.slice(2, 0, 192).slice(3, 0, 192)));
}

TEST(QwenImageVaeConfig, DefaultsAreQwenImagesVae) {
  const AutoencoderKLQwenImageConfig c = AutoencoderKLQwenImageConfig::from_json(json::object());
  EXPECT_EQ(c.base_dim, 96);
  EXPECT_EQ(c.z_dim, 16);
  EXPECT_EQ(c.dim_mult, (std::vector<int64_t>{1, 2, 4, 4}));
  EXPECT_EQ(c.scale_factor(), 8);
  ASSERT_EQ(c.latents_mean.size(), 16u);
  ASSERT_EQ(c.latents_std.size(), 16u);
  EXPECT_DOUBLE_EQ(c.latents_mean[0], -0.7571);
  EXPECT_DOUBLE_EQ(c.latents_std[15], 1.9160);

  const AutoencoderKLQwenImageConfig alt =
      AutoencoderKLQwenImageConfig::from_json(vae_component("tiny-qwen-image-vae-alt").config);
  EXPECT_EQ(alt.z_dim, 6);
  EXPECT_EQ(alt.scale_factor(), 8);
  EXPECT_EQ(alt.temperal_downsample, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(alt.attn_scales, (std::vector<double>{0.5}));
  EXPECT_EQ(alt.latents_mean, (std::vector<double>{-0.75, 0.25, 1.5, -0.125, 0.5, 0.0625}));
  EXPECT_EQ(AutoencoderKLQwenImageConfig::from_json(vae_component("tiny-qwen-image-vae").config).scale_factor(), 4);
}

std::string config_error(const json& j) {
  try {
    AutoencoderKLQwenImageConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QwenImageVaeConfig, BadValuesAreRefusedNamingTheField) {
  const json base = vae_component("tiny-qwen-image-vae").config;
  json j = base;
  j["temperal_downsample"] = {false, true, true};
  EXPECT_EQ(config_error(j), "vae config: temperal_downsample must have one entry per dim_mult entry but the last "
                             "(2), got 3");
  j = base;
  j["temperal_downsample"][1] = 1;
  EXPECT_EQ(config_error(j), "vae config: temperal_downsample[1] must be true or false, got 1");
  j = base;
  j["latents_mean"] = std::vector<double>(16, 0.0);
  EXPECT_EQ(config_error(j), "vae config: latents_mean must have one entry per latent channel (z_dim = 4), got 16");
  j = base;
  j.erase("latents_std");  // diffusers' default has Qwen-Image's 16 channels
  EXPECT_EQ(config_error(j), "vae config: latents_std must have one entry per latent channel (z_dim = 4), got 16");
  j = base;
  j["latents_std"][2] = 0.0;
  EXPECT_EQ(config_error(j), "vae config: latents_std[2] must be positive");
  j = base;
  j["dim_mult"][1] = 0;
  EXPECT_EQ(config_error(j), "vae config: dim_mult[1] = 0 must be in [1, 64]");
  j = base;
  j["base_dim"] = "24";
  EXPECT_EQ(config_error(j), "vae config: base_dim must be an integer, got '24'");
  j = base;
  j["dropout"] = 1.5;
  EXPECT_EQ(config_error(j), "vae config: dropout must be in [0, 1)");
  // The model-class row refuses it the same way, before building anything.
  j = base;
  j["num_res_blocks"] = -1;
  EXPECT_THROW(find_model_class("AutoencoderKLQwenImage")->build(j, at::TensorOptions().device(at::kMeta)), Error);
}

// A config that disagrees with its weights is refused by the strict key check, naming the keys.
TEST(QwenImageVaeConfig, ConfigThatDisagreesWithTheWeightsIsRefusedAtLoad) {
  Component c = vae_component("tiny-qwen-image-vae");
  c.config["num_res_blocks"] = 2;
  try {
    load_component(c, at::TensorOptions().dtype(at::kFloat));
    FAIL() << "expected a key mismatch";
  } catch (const Error& e) {
    // The encoder's blocks come first in the list of what is missing.
    EXPECT_NE(std::string(e.what()).find("missing (encoder.down_blocks.1.norm1.gamma"), std::string::npos) << e.what();
  }
}

TEST(QwenImageVaeGpu, DecodesInFloat32AndBFloat16_CUDA) {
  c10::InferenceMode guard;
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);
  for (const std::string& name : test_models()) {
    const GoldenFile golden = golden_file(name);
    for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
      auto vae = load_component_as<AutoencoderKLQwenImageImpl>(vae_component(name),
                                                               at::TensorOptions().dtype(dtype).device(at::kCUDA));
      for (const json& c : golden_cases(name).at("cases")) {
        const at::Tensor latents = golden[c.at("latents").get<std::string>()].to(at::kCUDA, dtype);
        const at::Tensor expected = golden[c.at("outputs").at(dtype_name).get<std::string>()];
        const at::Tensor image = vae->decode(latents).cpu();
        const std::string what = name + " " + c.at("name").get<std::string>() + " cuda " + dtype_name;
        expect_close(image, expected, what, dtype == at::kFloat ? test::kParityTolerance : kBf16GpuTolerance);
        std::printf("  %-58s max |diff| %.3e\n", what.c_str(), max_abs(image, expected));
      }
    }
  }
  at::globalContext().setAllowTF32CuDNN(tf32);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

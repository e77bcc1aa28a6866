// AutoencoderKLFlux2 against diffusers 0.37.0 (the FLUX.2 pin), on tools/fixtures/make_flux2_goldens.py's
// tiny-flux2-vae: Flux2KleinPipeline's decode tail (the packed latents unpacked, unnormalised with bn's running
// statistics, unpatchified, decoded) in float32 and in bfloat16, loaded through the model-class table.
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_flux2.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "torch/fixture_cpu.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::model_fixture_dir;

constexpr const char* kVae = "tiny-flux2-vae";

Component vae_component() {
  return test::fixture_component(kVae, "vae", ComponentRole::kVae, "AutoencoderKLFlux2");
}

TEST(Flux2Vae, DecodeTailMatchesDiffusers) {
  c10::InferenceMode guard;
  const test::GoldenFile golden(model_fixture_dir(kVae) + ".golden/vae.safetensors");
  const json cases = io::read_json_file(model_fixture_dir(kVae) + ".golden/cases.json").at("cases");
  ASSERT_FALSE(cases.empty());
  for (const auto& [dtype_name, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16", at::kBFloat16}}) {
    auto vae = load_component_as<AutoencoderKLFlux2Impl>(vae_component(), at::TensorOptions().dtype(dtype));
    ASSERT_TRUE(vae);
    for (const json& c : cases) {
      const std::string what = std::string(kVae) + " " + c.at("name").get<std::string>() + " " + dtype_name;
      const int64_t h = c.at("grid")[0].get<int64_t>(), w = c.at("grid")[1].get<int64_t>();
      const at::Tensor packed = golden[c.at("packed").get<std::string>()].to(dtype);  // [B, h w, 4C]
      // _unpack_latents_with_ids of the (0, row, column, 0) ids: each token back to its place.
      const at::Tensor patched = packed.view({packed.size(0), h, w, -1}).permute({0, 3, 1, 2}).contiguous();
      const at::Tensor latents = AutoencoderKLFlux2Impl::unpatchify(vae->unnormalize(patched));
      const json& out = c.at("outputs").at(dtype_name);
      test::expect_bit_identical_on_recording_cpu(latents, golden[out.at("latents").get<std::string>()],
                                                  what + " latents");
      const at::Tensor image = vae->decode(latents);
      ASSERT_EQ(image.scalar_type(), dtype);
      test::expect_close(image, golden[out.at("image").get<std::string>()], what,
                         dtype == at::kFloat ? test::kParityTolerance : 4e-3);
      // The decoder is AutoencoderKL's (autoencoder_kl.cpp): bit for bit diffusers' in bfloat16 and for one
      // image in float32; for a float32 batch of two its convolutions round up to 2e-6 apart from diffusers'
      // (as diffusers' own batch of two differs from its images decoded one by one, by 3e-6), far under one
      // uint8 step. The pipeline goldens hold the images to the uint8 bound.
      if (dtype == at::kBFloat16 || image.size(0) == 1)
        test::expect_bit_identical_on_recording_cpu(image, golden[out.at("image").get<std::string>()], what + " image");
    }
  }
}

TEST(Flux2Vae, ModelClassRowAndConfig) {
  const ModelClass* row = find_model_class("AutoencoderKLFlux2");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->role, ComponentRole::kVae);
  const json config = vae_component().config;
  EXPECT_EQ(row->facts(config).at("batch_norm_channels").get<int64_t>(), 16);
  auto module = row->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const auto buffers = module->named_buffers();
  EXPECT_TRUE(buffers.contains("bn.running_mean"));
  EXPECT_TRUE(buffers.contains("bn.running_var"));
  json bad = config;
  bad["patch_size"] = {1, 1};
  try {
    AutoencoderKLFlux2Config::from_json(bad);
    ADD_FAILURE() << "accepted patch_size [1, 1]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vae config: patch_size must be [2, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// GGUF transformer files (tools/fixtures/make_gguf_fixtures.py): tiny-flux-dev's transformer in BFL's layout
// resolves as a FLUX.1 single file with its storage recorded, its quantized Linear weights stay GGUF blocks
// (the file's bytes, rows of fused tensors split as diffusers splits a GGUFParameter) and dequantize to
// the values diffusers' dequantizer gives them, its other tensors load as the directory's, and broken
// files are refused in one line. The pixels against diffusers: PipelineParity (tiny-flux-dev.golden/gguf).
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/nn/gguf_dequant.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kFlux = kData + "/pipelines/tiny-flux-dev";
const std::string kQ8 = kData + "/gguf/tiny-flux-dev-q8_0.gguf";
const std::string kMixed = kData + "/gguf/tiny-flux-dev-mixed.gguf";

ModelDir resolve_gguf(const std::string& file) {
  SingleFileOptions o;
  o.base = kFlux;
  return resolve_model(file, "", nullptr, o);
}

std::map<std::string, at::Tensor> state_of(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters(true)) out[p.key()] = p.value();
  return out;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GgufLoading, FluxFileResolvesAsASingleFileWithItsStorage) {
  for (const auto& [file, storage] : {std::pair{kQ8, "gguf-Q8_0"}, std::pair{kMixed, "gguf-Q5_1"}}) {
    const ModelDir md = resolve_gguf(file);
    ASSERT_TRUE(md.single_file) << file;
    EXPECT_EQ(md.single_file->kind, "flux-dev");
    EXPECT_EQ(md.single_file->weight_storage, storage);
    EXPECT_EQ(md.at("transformer").single_file, md.single_file->path);
  }
}

TEST(GgufLoading, InspectCountsTheFilesTypes) {
  SingleFileOptions o;
  o.base = kFlux;
  const InspectReport report = inspect_model(kMixed, "", "", o);
  ASSERT_TRUE(report.ok()) << report.error;
  const auto j = report.to_json();
  EXPECT_TRUE(j["components"]["transformer"]["keys"]["ok"].get<bool>()) << j["components"]["transformer"].dump();
  const std::string text = report.to_text();
  for (const char* type : {"Q4_K", "Q5_1", "BF16", "F32"}) EXPECT_NE(text.find(type), std::string::npos) << text;
}

TEST(GgufLoading, QuantizedLinearWeightsStayBlocksAndTheRestIsTheDirectorys) {
  const at::TensorOptions bf16 = at::TensorOptions().dtype(at::kBFloat16);
  auto gguf = load_component(resolve_gguf(kMixed).at("transformer"), bf16);
  auto dir = load_component(resolve_model(kFlux).at("transformer"), bf16);
  const auto got = state_of(*gguf), want = state_of(*dir);
  ASSERT_EQ(got.size(), want.size());
  int blocks = 0;
  for (const auto& [key, value] : want) {
    SCOPED_TRACE(key);
    const at::Tensor& t = got.at(key);
    if (t.scalar_type() == at::kByte) {
      ++blocks;
      continue;
    }
    // F32 copies of the bf16 checkpoint: exact.
    EXPECT_TRUE(at::equal(t, value));
  }
  // The Linear weights of 32 or 256 inputs, and x_embedder with its BF16 weight: diffusers makes those 30 GGUFLinear
  // (BF16 is a GGUFParameter too), and so does dpinfer, which matters to a LoRA on them (PEFT keeps its factors in
  // the file's dtype beside a GGUF weight: PipelineParity's lora-storage goldens).
  EXPECT_EQ(blocks, 30);
  EXPECT_EQ(got.at("x_embedder.weight").scalar_type(), at::kByte);
  auto x_embedder = std::dynamic_pointer_cast<nn::LinearImpl>(gguf->named_modules()["x_embedder"]);
  ASSERT_NE(x_embedder, nullptr);
  ASSERT_TRUE(x_embedder->gguf_type());
  EXPECT_EQ(*x_embedder->gguf_type(), io::GgmlType::kBF16);
  // Dequantized, its values are the checkpoint's bfloat16 ones.
  EXPECT_TRUE(at::equal(nn::dequantize_gguf(x_embedder->weight, io::GgmlType::kBF16).to(at::kBFloat16),
                        want.at("x_embedder.weight")));
  // A fused tensor's rows: single_blocks.0.linear1 (q, k, v, mlp; Q5_1) gives to_k rows 32..63.
  const auto file = io::GgufFile::open(kMixed);
  const io::GgufTensor* linear1 = file->find("single_blocks.0.linear1.weight");
  ASSERT_NE(linear1, nullptr);
  ASSERT_EQ(linear1->type, io::GgmlType::kQ5_1);
  const at::Tensor to_k = got.at("single_transformer_blocks.0.attn.to_k.weight");
  ASSERT_EQ(to_k.sizes(), (at::IntArrayRef{32, 24}));  // 32 values a row: one 24-byte block
  EXPECT_EQ(std::memcmp(to_k.data_ptr(), linear1->data + 32 * 24, 32 * 24), 0);
  // The final AdaLN's halves swapped (BFL: shift, scale; diffusers: scale, shift), as rows of blocks.
  const io::GgufTensor* ada = file->find("final_layer.adaLN_modulation.1.weight");
  ASSERT_NE(ada, nullptr);
  const at::Tensor norm_out = got.at("norm_out.linear.weight");
  const int64_t row = norm_out.size(1);
  EXPECT_EQ(std::memcmp(norm_out.data_ptr(), ada->data + 32 * row, 32 * row), 0);
  EXPECT_EQ(std::memcmp(static_cast<const std::byte*>(norm_out.data_ptr()) + 32 * row, ada->data, 32 * row), 0);
}

TEST(GgufLoading, ALinearLayerDequantizesAsDiffusersGgufLinear) {
  // GGUFLinear.forward_native: F.linear(x, dequantize(blocks).to(compute), bias.to(compute)).
  nn::Linear layer(256, 4, /*bias=*/true, at::TensorOptions().dtype(at::kBFloat16));
  layer->store_gguf(io::GgmlType::kQ4_K, at::kBFloat16);
  ASSERT_EQ(layer->weight.scalar_type(), at::kByte);
  ASSERT_EQ(layer->weight.sizes(), (at::IntArrayRef{4, 144}));
  const auto file = io::GgufFile::open(kData + "/gguf/dequant.gguf");
  const io::GgufTensor* q = file->find("Q4_K_quantized");  // [4, 512]: the first 256 columns' blocks
  ASSERT_NE(q, nullptr);
  for (int64_t r = 0; r < 4; ++r)
    std::memcpy(static_cast<std::byte*>(layer->weight.data_ptr()) + r * 144, q->data + r * 288, 144);
  layer->bias.copy_(at::arange(4, at::TensorOptions().dtype(at::kFloat)).to(at::kBFloat16));
  const at::Tensor x = at::randn({2, 3, 256}, at::TensorOptions().dtype(at::kBFloat16));
  const at::Tensor w = nn::dequantize_gguf(layer->weight, io::GgmlType::kQ4_K);
  EXPECT_EQ(w.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(layer->forward(x), at::linear(x, w.to(at::kBFloat16), layer->bias)));
  // A non-contiguous input takes at::linear too (no fold: the dequantized weight requires no grad).
  const at::Tensor xt = at::randn({3, 2, 256}, at::TensorOptions().dtype(at::kBFloat16)).transpose(0, 1);
  EXPECT_TRUE(at::equal(layer->forward(xt), at::linear(xt, w.to(at::kBFloat16), layer->bias)));
}

TEST(GgufLoading, BrokenFilesAreOneLineInputErrors) {
  test::TempDir dir;
  const std::string bytes = bytes_of(kQ8);
  for (size_t cut : {size_t{10}, size_t{200}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string path = dir.file("cut.gguf");
    test::write_file(path, bytes.substr(0, cut));
    try {
      resolve_gguf(path);
      ADD_FAILURE() << "a file cut to " << cut << " bytes resolved";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_NE(message.find(path), std::string::npos) << message;
    }
  }
  // A GGUF file that is not a transformer dpinfer knows.
  try {
    resolve_gguf(kData + "/gguf/metadata.gguf");
    ADD_FAILURE() << "metadata.gguf resolved";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a transformer dpinfer knows"), std::string::npos) << e.what();
  }
  // --weight-storage fp8 with a GGUF file.
  LoadRequest r;
  r.model = kQ8;
  r.base = kFlux;
  r.dtype = "bf16";
  r.weight_storage = "fp8";
  try {
    load_text_to_image(r);
    ADD_FAILURE() << "fp8 storage of a GGUF file loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a GGUF file"), std::string::npos) << e.what();
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

// Finding a component's weight files and loading them strictly into a small hand-built
// module, from files written by the test's own writer and by the reference python
// writer (tests/data/safetensors, tools/fixtures/make_safetensors.py).
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>  // torch::Tensor and its factories: not all of <torch/torch.h> (jit, optim, data)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

std::string dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "F32";
    case torch::kHalf: return "F16";
    case torch::kBFloat16: return "BF16";
    case torch::kDouble: return "F64";
    case torch::kLong: return "I64";
    case torch::kInt: return "I32";
    case torch::kBool: return "BOOL";
    case torch::kByte: return "U8";
    case torch::kFloat8_e4m3fn: return "F8_E4M3";
    case torch::kFloat8_e5m2: return "F8_E5M2";
    default: throw std::runtime_error("test writer: unsupported dtype");
  }
}

/// Writes `tensors` as a safetensors file, in the given order. With `pad`, the header is
/// padded with spaces to a multiple of 8 as the reference writer does; without, it is
/// padded to make the data start at an odd offset.
void write_safetensors(const std::string& path, const Tensors& tensors, bool pad = true) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    torch::Tensor t = tensor.contiguous().cpu();
    const size_t begin = data.size();
    data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  if (pad) {
    text.append((8 - text.size() % 8) % 8, ' ');
  } else if ((8 + text.size()) % 2 == 0) {
    text += ' ';
  }
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  test::write_file(path, bytes + text + data);
}

/// (arange(n) - n // 2 + len(name)) / 8, as tools/fixtures/make_safetensors.py writes.
torch::Tensor values(const std::string& name, std::vector<int64_t> shape,
                     torch::ScalarType dtype = torch::kFloat) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto v = (torch::arange(n, torch::kDouble) - static_cast<double>(n / 2) +
            static_cast<double>(name.size())) /
           8;
  return v.reshape(shape).to(dtype);
}

struct TinyAttentionImpl : torch::nn::Module {
  TinyAttentionImpl() {
    to_q = register_module("to_q", torch::nn::Linear(2, 2));
    to_out = register_module("to_out", torch::nn::ModuleList(torch::nn::Linear(2, 2)));
  }
  torch::nn::Linear to_q{nullptr};
  torch::nn::ModuleList to_out{nullptr};
};
TORCH_MODULE(TinyAttention);

/// Keys: fc.{weight,bias} attn.to_q.{weight,bias} attn.to_out.0.{weight,bias} scale.
struct TinyModelImpl : torch::nn::Module {
  TinyModelImpl() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    attn = register_module("attn", TinyAttention());
    scale = register_buffer("scale", torch::zeros({2}));
  }
  torch::nn::Linear fc{nullptr};
  TinyAttention attn{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(TinyModel);

const std::vector<std::pair<std::string, std::vector<int64_t>>> kTinyKeys{
    {"fc.weight", {2, 3}},
    {"fc.bias", {2}},
    {"attn.to_q.weight", {2, 2}},
    {"attn.to_q.bias", {2}},
    {"attn.to_out.0.weight", {2, 2}},
    {"attn.to_out.0.bias", {2}},
    {"scale", {2}},
};

Tensors tiny_tensors(torch::ScalarType dtype = torch::kFloat) {
  Tensors out;
  for (const auto& [name, shape] : kTinyKeys) out.emplace_back(name, values(name, shape, dtype));
  return out;
}

void expect_tiny_values(TinyModel& model) {
  std::map<std::string, torch::Tensor> state;
  for (const auto& p : model->named_parameters()) state[p.key()] = p.value();
  for (const auto& b : model->named_buffers()) state[b.key()] = b.value();
  ASSERT_EQ(state.size(), kTinyKeys.size());
  for (const auto& [name, shape] : kTinyKeys) {
    const torch::Tensor& got = state.at(name);
    EXPECT_TRUE(torch::equal(got.cpu(), values(name, shape, got.scalar_type()))) << name << "\n" << got;
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle)                                  \
  do {                                                                     \
    const std::string h_ = (haystack);                                     \
    EXPECT_NE(h_.find(needle), std::string::npos) << "in: " << h_;         \
    EXPECT_EQ(h_.find('\n'), std::string::npos) << "not one line: " << h_; \
  } while (0)

class Weights : public ::testing::Test {
 protected:
  std::string file(const std::string& name) const { return dir_.file(name); }
  std::string component_dir(const std::string& name) {
    const std::string path = dir_.file(name);
    fs::create_directories(path);
    return path;
  }
  test::TempDir dir_;
};

TEST_F(Weights, LoadsExactValuesFromItsOwnWriter) {
  write_safetensors(file("m.safetensors"), tiny_tensors());
  TinyModel model;
  model->fc->weight.set_requires_grad(true);
  load_weights(*model, {file("m.safetensors")}, {}, "tiny");
  expect_tiny_values(model);
  EXPECT_TRUE(model->fc->weight.requires_grad());
}

TEST_F(Weights, LoadsTheReferenceWritersFile) {
  TinyModel model;
  load_weights(*model, {DPINFER_TEST_DATA_DIR "/safetensors/tiny_model.safetensors"}, {}, "tiny");
  expect_tiny_values(model);
}

TEST_F(Weights, RenamesLegacyAttentionNamesAndConvertsF16ToF32) {
  TinyModel model;
  load_weights(*model, {DPINFER_TEST_DATA_DIR "/safetensors/tiny_model_legacy.fp16.safetensors"},
               find_model_class("AutoencoderKL")->renames, "vae");
  EXPECT_EQ(model->fc->weight.scalar_type(), torch::kFloat);
  expect_tiny_values(model);
}

TEST_F(Weights, LegacyNamesWithoutRenamesAreUnexpected) {
  TinyModel model;
  const std::string message = error_of([&] {
    load_weights(*model, {DPINFER_TEST_DATA_DIR "/safetensors/tiny_model_legacy.fp16.safetensors"}, {},
                 "vae");
  });
  EXPECT_CONTAINS(message, "component 'vae': the weights in '" DPINFER_TEST_DATA_DIR
                           "/safetensors/tiny_model_legacy.fp16.safetensors' do not match the model: ");
  EXPECT_CONTAINS(
      message, "4 missing (attn.to_q.weight, attn.to_q.bias, attn.to_out.0.weight, attn.to_out.0.bias)");
  EXPECT_CONTAINS(
      message,
      "4 unexpected (attn.proj_attn.bias, attn.proj_attn.weight, attn.query.bias, attn.query.weight)");
}

TEST_F(Weights, VaeRenamesCoverAllFourLegacyNames) {
  const KeyRenames& r = find_model_class("AutoencoderKL")->renames;
  ASSERT_EQ(r.modules.size(), 4u);
  std::map<std::string, std::string> m;
  for (const auto& k : r.modules) m[k.from] = k.to;
  EXPECT_EQ(m.at("query"), "to_q");
  EXPECT_EQ(m.at("key"), "to_k");
  EXPECT_EQ(m.at("value"), "to_v");
  EXPECT_EQ(m.at("proj_attn"), "to_out.0");
}

TEST_F(Weights, ConvertsToHalfAndBFloat16Parameters) {
  write_safetensors(file("m.safetensors"), tiny_tensors(torch::kFloat));
  for (auto dtype : {torch::kHalf, torch::kBFloat16, torch::kDouble}) {
    TinyModel model;
    model->to(dtype);
    load_weights(*model, {file("m.safetensors")}, {}, "tiny");
    EXPECT_EQ(model->fc->weight.scalar_type(), dtype);
    expect_tiny_values(model);
  }
}

TEST_F(Weights, LoadsDataThatIsNotAligned) {
  write_safetensors(file("odd.safetensors"), tiny_tensors(torch::kFloat), /*pad=*/false);
  TinyModel model;
  load_weights(*model, {file("odd.safetensors")}, {}, "tiny");
  expect_tiny_values(model);
}

TEST_F(Weights, ReportsMissingUnexpectedAndMismatchedInOneErrorAndWritesNothing) {
  Tensors tensors = tiny_tensors();
  tensors.erase(tensors.end() - 1);         // scale
  tensors[0].second = torch::ones({3, 3});  // fc.weight
  tensors.emplace_back("extra.weight", torch::ones({1}));
  write_safetensors(file("m.safetensors"), tensors);
  TinyModel model;
  const torch::Tensor bias_before = model->fc->bias.clone();
  const std::string message =
      error_of([&] { load_weights(*model, {file("m.safetensors")}, {}, "unet"); });
  EXPECT_CONTAINS(message,
                  "component 'unet': the weights in '" + file("m.safetensors") +
                      "' do not match the model: 1 missing (scale), 1 unexpected (extra.weight), "
                      "1 of the wrong shape (fc.weight is [3,3] in the file but [2,3] in the model); "
                      "check that the component's config belongs to these weights");
  EXPECT_TRUE(torch::equal(model->fc->bias, bias_before));
}

TEST_F(Weights, ListsTenOfEachAndCountsTheRest) {
  struct Many : torch::nn::Module {
    Many() {
      auto list = register_module("layers", torch::nn::ModuleList());
      for (int i = 0; i < 12; ++i) list->push_back(torch::nn::Linear(1, 1));
    }
  };
  write_safetensors(file("m.safetensors"), {{"other", torch::ones({1})}});
  Many model;
  const std::string message =
      error_of([&] { load_weights(model, {file("m.safetensors")}, {}, "unet"); });
  EXPECT_CONTAINS(message,
                  "24 missing (layers.0.weight, layers.0.bias, layers.1.weight, layers.1.bias, "
                  "layers.2.weight, layers.2.bias, layers.3.weight, layers.3.bias, layers.4.weight, "
                  "layers.4.bias, and 14 more), 1 unexpected (other)");
}

TEST_F(Weights, RefusesAKeyGivenTwice) {
  Tensors both = tiny_tensors();
  both.emplace_back("attn.query.weight", torch::ones({2, 2}));
  write_safetensors(file("both.safetensors"), both);
  TinyModel model;
  const std::string twice =
      error_of([&] { load_weights(*model, {file("both.safetensors")}, find_model_class("AutoencoderKL")->renames, "vae"); });
  EXPECT_CONTAINS(twice, "component 'vae': 'attn.to_q.weight' is given twice, as '");
  EXPECT_CONTAINS(twice, "'attn.query.weight' in '" + file("both.safetensors") + "'");
  EXPECT_CONTAINS(twice, "'attn.to_q.weight' in '" + file("both.safetensors") + "'");

  write_safetensors(file("a.safetensors"), tiny_tensors());
  write_safetensors(file("b.safetensors"), {{"fc.bias", torch::ones({2})}});
  EXPECT_CONTAINS(error_of([&] {
                    load_weights(*model, {file("a.safetensors"), file("b.safetensors")}, {}, "unet");
                  }),
                  "'fc.bias' is given twice");
}

// A converter's pieces (TensorPart::target_row) fill one module tensor from row ranges of a
// file tensor in another order, as FLUX.1's BFL final_layer.adaLN_modulation.1 (shift, scale)
// becomes diffusers' norm_out.linear (scale, shift); converted to the parameter's dtype.
TEST_F(Weights, ConverterPiecesFillOneTensorInAnotherRowOrder) {
  const torch::Tensor fused = values("fused", {4, 2});  // rows 0..3
  Tensors file_tensors{{"fused", fused.to(torch::kHalf)}};
  for (const auto& [name, t] : tiny_tensors(torch::kHalf))
    if (name != "attn.to_q.weight") file_tensors.emplace_back("orig." + name, t);
  write_safetensors(file("pieces.safetensors"), file_tensors);
  // attn.to_q.weight [2,2] is the file's rows 3 then 1 of "fused"; the other keys are "orig.<key>", whole.
  auto convert = [](std::vector<std::pair<int64_t, int64_t>> q_pieces) {
    return [q_pieces](const std::vector<SourceTensor>& tensors) {
      std::vector<TensorPart> parts;
      for (size_t i = 0; i < tensors.size(); ++i) {
        const SourceTensor& t = tensors[i];
        if (t.name == "fused") {
          for (const auto& [source_row, target_row] : q_pieces) {
            TensorPart p{i, "attn.to_q.weight", source_row, 1, {2, 2}};
            p.target_row = target_row;
            parts.push_back(p);
          }
        } else {
          parts.push_back({i, t.name.substr(5), 0, -1, t.shape});  // "orig.<key>" whole
        }
      }
      return parts;
    };
  };
  TinyModel model;
  LoadOptions load;
  load.convert = convert({{3, 0}, {1, 1}});
  EXPECT_TRUE(match_keys(*model, {file("pieces.safetensors")}, {}, "tiny", load.convert).ok());
  load_weights(*model, {file("pieces.safetensors")}, {}, "tiny", load);
  const torch::Tensor want = torch::cat({fused.slice(0, 3, 4), fused.slice(0, 1, 2)}).to(torch::kHalf).to(torch::kFloat);
  EXPECT_TRUE(torch::equal(model->attn->to_q->weight, want)) << model->attn->to_q->weight;
  EXPECT_TRUE(torch::equal(model->fc->bias, values("fc.bias", {2}, torch::kHalf).to(torch::kFloat)));

  // Pieces that overlap, or leave a row unfilled, are a mismatch reported before anything is written.
  for (const auto& bad : {std::vector<std::pair<int64_t, int64_t>>{{3, 0}, {1, 0}},
                          std::vector<std::pair<int64_t, int64_t>>{{3, 1}}}) {
    TinyModel fresh;
    const KeyReport report = match_keys(*fresh, {file("pieces.safetensors")}, {}, "tiny", convert(bad));
    ASSERT_EQ(report.mismatched.size(), 1u);
    EXPECT_CONTAINS(report.mismatched[0], "attn.to_q.weight is [2,2] but its pieces from 'fused' do not fill its rows once each");
    LoadOptions o;
    o.convert = convert(bad);
    EXPECT_CONTAINS(error_of([&] { load_weights(*fresh, {file("pieces.safetensors")}, {}, "tiny", o); }),
                    "do not fill its rows once each");
  }
  // A piece past the end of its module tensor is refused in one line naming the file tensor.
  TinyModel fresh;
  EXPECT_CONTAINS(error_of([&] { match_keys(*fresh, {file("pieces.safetensors")}, {}, "tiny", convert({{3, 2}})); }),
                  "tensor 'fused' rows [3, 4) cannot be rows [2, 3) of [2,2] for 'attn.to_q.weight'");
}

TEST_F(Weights, IgnoresKeysLikePositionIds) {
  struct Embeddings : torch::nn::Module {
    Embeddings() {
      token = register_module("token_embedding", torch::nn::Embedding(4, 2));
      ids = register_buffer("position_ids", torch::arange(3).unsqueeze(0));
    }
    torch::nn::Embedding token{nullptr};
    torch::Tensor ids;
  };
  struct Text : torch::nn::Module {
    Text() { emb = register_module("embeddings", std::make_shared<Embeddings>()); }
    std::shared_ptr<Embeddings> emb;
  };
  struct Clip : torch::nn::Module {
    Clip() { text = register_module("text_model", std::make_shared<Text>()); }
    std::shared_ptr<Text> text;
  };
  const std::string key = "text_model.embeddings.token_embedding.weight";
  write_safetensors(file("without.safetensors"), {{key, values(key, {4, 2})}});
  write_safetensors(file("with.safetensors"),
                    {{key, values(key, {4, 2})},
                     {"text_model.embeddings.position_ids", torch::full({1, 3}, 9, torch::kLong)}});
  for (const char* name : {"without.safetensors", "with.safetensors"}) {
    Clip model;
    load_weights(model, {file(name)}, find_model_class("CLIPTextModel")->renames, "text_encoder");
    EXPECT_TRUE(torch::equal(model.text->emb->token->weight, values(key, {4, 2}))) << name;
    EXPECT_TRUE(torch::equal(model.text->emb->ids, torch::arange(3).unsqueeze(0))) << name;
  }
  Clip model;
  EXPECT_CONTAINS(
      error_of([&] { load_weights(model, {file("without.safetensors")}, {}, "text_encoder"); }),
      "1 missing (text_model.embeddings.position_ids)");
}

// Mistral3ForConditionalGeneration (FLUX.2 [dev]'s text encoder) as transformers 4.x saves it
// (language_model.model.*, language_model.lm_head) and as transformers 5 does (model.language_model.*, lm_head):
// the text model loads from either, and the vision tower and projector of either are skipped.
TEST_F(Weights, LoadsMistral3TextModelsSavedByEitherTransformers) {
  const nlohmann::json config = {{"text_config",
                                  {{"hidden_size", 4}, {"intermediate_size", 6}, {"num_hidden_layers", 1},
                                   {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 2},
                                   {"vocab_size", 5}, {"sliding_window", nullptr}}}};
  const ModelClass* row = find_model_class("Mistral3ForConditionalGeneration");
  ASSERT_NE(row, nullptr);
  const std::shared_ptr<torch::nn::Module> reference = row->build(config, torch::TensorOptions());
  Tensors v4, v5;
  for (const auto& p : reference->named_parameters()) {
    const std::string key = p.key();  // "language_model.model.layers.0..."
    ASSERT_EQ(key.rfind("language_model.model.", 0), 0u) << key;
    const torch::Tensor value = values(key, p.value().sizes().vec());
    v4.emplace_back(key, value);
    v5.emplace_back("model.language_model." + key.substr(std::string("language_model.model.").size()), value);
  }
  v4.emplace_back("language_model.lm_head.weight", torch::ones({5, 4}));
  v4.emplace_back("vision_tower.patch_conv.weight", torch::ones({2, 3, 1, 1}));
  v4.emplace_back("multi_modal_projector.linear_1.weight", torch::ones({2, 2}));
  v5.emplace_back("lm_head.weight", torch::ones({5, 4}));
  v5.emplace_back("model.vision_tower.patch_conv.weight", torch::ones({2, 3, 1, 1}));
  v5.emplace_back("model.multi_modal_projector.linear_1.weight", torch::ones({2, 2}));
  write_safetensors(file("v4.safetensors"), v4);
  write_safetensors(file("v5.safetensors"), v5);
  for (const char* name : {"v4.safetensors", "v5.safetensors"}) {
    const std::shared_ptr<torch::nn::Module> model = row->build(config, torch::TensorOptions());
    load_weights(*model, {file(name)}, row->renames, "text_encoder");
    for (const auto& p : model->named_parameters())
      EXPECT_TRUE(torch::equal(p.value(), values(p.key(), p.value().sizes().vec()))) << name << " " << p.key();
  }
  // Another parent is not guessed at: it is unexpected, and the text model's keys are missing.
  Tensors other;
  for (const auto& [key, value] : v4)
    if (key.rfind("language_model.model.", 0) == 0) other.emplace_back("text." + key, value);
  write_safetensors(file("other.safetensors"), other);
  const std::shared_ptr<torch::nn::Module> model = row->build(config, torch::TensorOptions());
  EXPECT_CONTAINS(error_of([&] { load_weights(*model, {file("other.safetensors")}, row->renames, "text_encoder"); }),
                  "unexpected (text.language_model.model.");
}

TEST_F(Weights, RefusesADtypeItCannotLoad) {
  // A hand-made file: fc.bias as 4 F4 values (2 bytes).
  const std::string header = R"({"fc.bias":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  test::write_file(file("f4.safetensors"), bytes + header + "x");
  TinyModel model;
  EXPECT_CONTAINS(error_of([&] { load_weights(*model, {file("f4.safetensors")}, {}, "unet"); }),
                  "tensor 'fc.bias' is F4, which dpinfer cannot load");
}

// fp8: plain F8_E4M3 / F8_E5M2 tensors are upcast exactly to the parameter's dtype; scaled fp8
// files (ComfyUI's `<layer>.scale_weight` + `scaled_fp8` marker, or `<layer>.weight_scale` +
// `<layer>.comfy_quant`)
// load fp8.to(float32) * scale, and their scale, input-scale and marker keys are consumed.
TEST_F(Weights, UpcastsF8E4M3AndF8E5M2ExactlyToEachParameterDtype) {
  for (auto fp8 : {torch::kFloat8_e4m3fn, torch::kFloat8_e5m2}) {
    Tensors tensors;
    for (const auto& [name, shape] : kTinyKeys) tensors.emplace_back(name, values(name, shape).to(fp8));
    write_safetensors(file("fp8.safetensors"), tensors);
    for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      TinyModel model;
      model->to(dtype);
      load_weights(*model, {file("fp8.safetensors")}, {}, "unet");
      auto params = model->named_parameters();
      for (const auto& [name, tensor] : tensors) {
        const torch::Tensor& got = name == "scale" ? model->scale : params[name];
        EXPECT_TRUE(torch::equal(got, tensor.to(torch::kFloat).to(dtype))) << name << " " << fp8 << " " << dtype;
      }
    }
  }
}

TEST_F(Weights, LoadsScaledFp8InBothScaleConventions) {
  const torch::Tensor fc = values("fc.weight", {2, 3}).to(torch::kFloat8_e4m3fn);
  const torch::Tensor q = values("attn.to_q.weight", {2, 2}).to(torch::kFloat8_e5m2);
  Tensors tensors = tiny_tensors();
  tensors[0].second = fc;
  tensors[2].second = q;
  tensors.emplace_back("scaled_fp8", torch::empty({0}, torch::kFloat8_e4m3fn));
  tensors.emplace_back("fc.scale_weight", torch::tensor(0.0625f).reshape({}));
  tensors.emplace_back("fc.scale_input", torch::tensor(1.5f).reshape({}));
  tensors.emplace_back("attn.to_q.weight_scale", torch::tensor({3.0}, torch::kDouble));
  tensors.emplace_back("attn.to_q.input_scale", torch::tensor(2.0f).reshape({}));
  const std::string conf = R"({"format": "float8_e5m2"})";
  tensors.emplace_back("attn.to_q.comfy_quant",
                       torch::from_blob(const_cast<char*>(conf.data()), {static_cast<int64_t>(conf.size())}, torch::kByte).clone());
  write_safetensors(file("scaled.safetensors"), tensors);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    TinyModel model;
    model->to(dtype);
    EXPECT_EQ(match_keys(*model, {file("scaled.safetensors")}, {}, "unet").matched, kTinyKeys.size());
    load_weights(*model, {file("scaled.safetensors")}, {}, "unet");
    EXPECT_TRUE(torch::equal(model->fc->weight, (fc.to(torch::kFloat) * 0.0625f).to(dtype)));
    EXPECT_TRUE(torch::equal(model->attn->to_q->weight, (q.to(torch::kFloat) * 3.0f).to(dtype)));
    EXPECT_TRUE(torch::equal(model->fc->bias, values("fc.bias", {2}, dtype)));
  }
}

struct IntBufferImpl : torch::nn::Module {
  IntBufferImpl() { ids = register_buffer("ids", torch::zeros({2}, torch::kLong)); }
  torch::Tensor ids;
};
TORCH_MODULE(IntBuffer);

TEST_F(Weights, RefusesBadFp8InOneLineNamingTheFile) {
  const auto fp8 = [](const std::string& name, std::vector<int64_t> shape) {
    return values(name, std::move(shape)).to(torch::kFloat8_e4m3fn);
  };
  const auto refusal = [&](Tensors tensors) {
    write_safetensors(file("bad.safetensors"), tensors);
    TinyModel model;
    bool input_error = false;
    std::string message;
    try {
      load_weights(*model, {file("bad.safetensors")}, {}, "unet");
    } catch (const InputError& e) {
      input_error = true;
      message = e.what();
    }
    EXPECT_TRUE(input_error) << message;
    EXPECT_CONTAINS(message, "'" + file("bad.safetensors") + "': ");
    return message;
  };
  const auto with = [](Tensors base, const std::string& key, const torch::Tensor& t) {
    for (auto& [name, tensor] : base)
      if (name == key) tensor = t;
    return base;
  };
  Tensors scaled = with(tiny_tensors(), "fc.weight", fp8("fc.weight", {2, 3}));
  scaled.emplace_back("fc.scale_weight", torch::tensor(0.5f).reshape({}));

  Tensors missing = with(scaled, "attn.to_q.weight", fp8("attn.to_q.weight", {2, 2}));
  EXPECT_CONTAINS(refusal(missing),
                  "fp8 tensor 'attn.to_q.weight' has no scale in this scaled fp8 file (expected "
                  "'attn.to_q.scale_weight' or 'attn.to_q.weight_scale')");
  Tensors marker_only = with(tiny_tensors(), "fc.weight", fp8("fc.weight", {2, 3}));
  marker_only.emplace_back("scaled_fp8", torch::empty({0}, torch::kFloat8_e4m3fn));
  EXPECT_CONTAINS(refusal(marker_only), "fp8 tensor 'fc.weight' has no scale");

  EXPECT_CONTAINS(refusal(with(scaled, "fc.scale_weight", torch::tensor({0.5f, 0.25f}))),
                  "scale tensor 'fc.scale_weight' has 2 values; dpinfer reads only per-tensor fp8 scales");
  EXPECT_CONTAINS(refusal(with(scaled, "fc.scale_weight", torch::tensor(INFINITY).reshape({}))),
                  "scale tensor 'fc.scale_weight' is inf, not a finite number");
  EXPECT_CONTAINS(refusal(with(scaled, "fc.scale_weight", torch::tensor(NAN).reshape({}))), "not a finite number");
  EXPECT_CONTAINS(refusal(with(scaled, "fc.scale_weight", torch::tensor({2}, torch::kLong))),
                  "scale tensor 'fc.scale_weight' is I64, expected F32, F16, BF16 or F64");
  EXPECT_CONTAINS(refusal(with(scaled, "fc.weight", values("fc.weight", {2, 3}))),
                  "'fc.scale_weight' scales 'fc.weight', which is F32, not fp8");
  Tensors two = scaled;
  two.emplace_back("fc.weight_scale", torch::tensor(0.5f).reshape({}));
  EXPECT_CONTAINS(refusal(two), "'fc.weight' has two scales, 'fc.scale_weight' and 'fc.weight_scale'");

  write_safetensors(file("ids.safetensors"), {{"ids", torch::tensor({1.0f, 2.0f}).to(torch::kFloat8_e5m2)}});
  IntBuffer ints;
  EXPECT_CONTAINS(error_of([&] { load_weights(*ints, {file("ids.safetensors")}, {}, "unet"); }),
                  "'" + file("ids.safetensors") +
                      "': tensor 'ids' is F8_E5M2 but the model holds 'ids' as Long, which fp8 cannot be loaded into");
}

TEST_F(Weights, ReleasesTheMappingAfterLoading) {
  write_safetensors(file("m.safetensors"), tiny_tensors());
  TinyModel model;
  load_weights(*model, {file("m.safetensors")}, {}, "tiny");
  EXPECT_EQ(test::read_file("/proc/self/maps").find(file("m.safetensors")), std::string::npos);
}

TEST_F(Weights, LoadsIntoCudaParameters_CUDA) {
  write_safetensors(file("m.safetensors"), tiny_tensors(torch::kHalf));
  TinyModel model;
  model->to(torch::kCUDA);
  load_weights(*model, {file("m.safetensors")}, {}, "tiny");
  EXPECT_TRUE(model->fc->weight.is_cuda());
  expect_tiny_values(model);
}

TEST_F(Weights, FindsTheSingleFileByDiffusersOrTransformersName) {
  const std::string unet = component_dir("unet");
  write_safetensors(unet + "/diffusion_pytorch_model.safetensors", tiny_tensors());
  WeightFiles found = find_weight_files(unet);
  EXPECT_EQ(found.files, std::vector<std::string>{unet + "/diffusion_pytorch_model.safetensors"});
  EXPECT_TRUE(found.index.empty());
  EXPECT_TRUE(found.variant.empty());

  const std::string text = component_dir("text_encoder");
  write_safetensors(text + "/model.safetensors", tiny_tensors());
  EXPECT_EQ(find_weight_files(text).files, std::vector<std::string>{text + "/model.safetensors"});
}

TEST_F(Weights, PicksTheVariantAndListsWhatExistsWhenItIsMissing) {
  const std::string unet = component_dir("unet");
  write_safetensors(unet + "/diffusion_pytorch_model.safetensors", tiny_tensors());
  write_safetensors(unet + "/diffusion_pytorch_model.fp16.safetensors", tiny_tensors(torch::kHalf));
  test::write_file(unet + "/config.json", "{}");
  EXPECT_EQ(find_weight_files(unet).files[0], unet + "/diffusion_pytorch_model.safetensors");
  WeightFiles fp16 = find_weight_files(unet, "fp16");
  EXPECT_EQ(fp16.files, std::vector<std::string>{unet + "/diffusion_pytorch_model.fp16.safetensors"});
  EXPECT_EQ(fp16.variant, "fp16");
  EXPECT_TRUE(has_weight_variant(unet, "fp16"));
  EXPECT_FALSE(has_weight_variant(unet, "bf16"));
  EXPECT_CONTAINS(error_of([&] { find_weight_files(unet, "bf16"); }),
                  "'" + unet +
                      "' has no bf16 weights (looked for diffusion_pytorch_model.bf16.safetensors, "
                      "model.bf16.safetensors and their sharded indexes); it has config.json, "
                      "diffusion_pytorch_model.fp16.safetensors, diffusion_pytorch_model.safetensors; "
                      "drop --variant bf16 or download the bf16 files");

  TinyModel model;
  load_weights(*model, fp16.files, {}, "unet");
  expect_tiny_values(model);

  const std::string text = component_dir("text_encoder");
  write_safetensors(text + "/model.fp16.safetensors", tiny_tensors(torch::kHalf));
  EXPECT_EQ(find_weight_files(text, "fp16").files[0], text + "/model.fp16.safetensors");
  EXPECT_TRUE(has_weight_variant(text, "fp16"));
  EXPECT_CONTAINS(error_of([&] { find_weight_files(text); }), "has no safetensors weights");
}

TEST_F(Weights, ReadsAShardedIndexAndLoadsAllShards) {
  const std::string unet = component_dir("unet");
  Tensors all = tiny_tensors();
  Tensors first(all.begin(), all.begin() + 3), second(all.begin() + 3, all.end());
  write_safetensors(unet + "/diffusion_pytorch_model-00002-of-00002.safetensors", second);
  write_safetensors(unet + "/diffusion_pytorch_model-00001-of-00002.safetensors", first);
  nlohmann::json index = {{"metadata", {{"total_size", 64}}}, {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < all.size(); ++i)
    index["weight_map"][all[i].first] = i < 3 ? "diffusion_pytorch_model-00001-of-00002.safetensors"
                                              : "diffusion_pytorch_model-00002-of-00002.safetensors";
  test::write_file(unet + "/diffusion_pytorch_model.safetensors.index.json", index.dump(2));
  // A stray single file must not win over the index, as in diffusers.
  write_safetensors(unet + "/diffusion_pytorch_model.safetensors", {{"stray", torch::ones({1})}});

  WeightFiles found = find_weight_files(unet);
  EXPECT_EQ(found.index, unet + "/diffusion_pytorch_model.safetensors.index.json");
  EXPECT_EQ(found.files,
            (std::vector<std::string>{unet + "/diffusion_pytorch_model-00001-of-00002.safetensors",
                                      unet + "/diffusion_pytorch_model-00002-of-00002.safetensors"}));
  TinyModel model;
  load_weights(*model, found.files, {}, "unet");
  expect_tiny_values(model);

  const std::string message = error_of([&] { load_weights(*model, {found.files[0]}, {}, "unet"); });
  EXPECT_CONTAINS(message,
                  "4 missing (attn.to_q.bias, attn.to_out.0.weight, attn.to_out.0.bias, scale)");
}

TEST_F(Weights, FindsVariantIndexesInBothNamings) {
  for (const std::string name : {"diffusion_pytorch_model.safetensors.index.fp16.json",
                                 "diffusion_pytorch_model.fp16.safetensors.index.json"}) {
    const std::string unet = component_dir("unet-" + name);
    write_safetensors(unet + "/diffusion_pytorch_model.fp16-00001-of-00001.safetensors",
                      tiny_tensors(torch::kHalf));
    nlohmann::json index = {{"weight_map", nlohmann::json::object()}};
    for (const auto& [key, shape] : kTinyKeys)
      index["weight_map"][key] = "diffusion_pytorch_model.fp16-00001-of-00001.safetensors";
    test::write_file(unet + "/" + name, index.dump());
    WeightFiles found = find_weight_files(unet, "fp16");
    EXPECT_EQ(found.index, unet + "/" + name);
    ASSERT_EQ(found.files.size(), 1u);
    EXPECT_TRUE(has_weight_variant(unet, "fp16")) << name;
  }
}

TEST_F(Weights, RefusesABrokenIndex) {
  const std::string unet = component_dir("unet");
  const std::string index_path = unet + "/diffusion_pytorch_model.safetensors.index.json";
  write_safetensors(unet + "/shard.safetensors", {{"a", torch::ones({1})}, {"b", torch::ones({1})}});
  auto expect_index_error = [&](const nlohmann::json& index, const std::string& part) {
    test::write_file(index_path, index.dump());
    EXPECT_CONTAINS(error_of([&] { find_weight_files(unet); }), "'" + index_path + "'" + part);
  };
  expect_index_error(
      {{"weight_map", {{"a", "shard.safetensors"}, {"b", "gone.safetensors"}}}},
      " names shard 'gone.safetensors' but '" + unet + "/gone.safetensors' does not exist");
  expect_index_error(
      {{"weight_map",
        {{"a", "shard.safetensors"}, {"b", "shard.safetensors"}, {"c", "shard.safetensors"}}}},
      " puts tensor 'c' in 'shard.safetensors' but that shard does not have it");
  expect_index_error({{"weight_map", {{"a", "shard.safetensors"}}}},
                     " does not list tensor 'b' of shard 'shard.safetensors'");
  expect_index_error({{"weight_map", {{"a", "../unet/shard.safetensors"}}}},
                     ": weight_map puts 'a' in '../unet/shard.safetensors', which is not a file inside");
  expect_index_error({{"weight_map", {{"a", "/etc/passwd"}}}}, ": weight_map puts 'a' in '/etc/passwd'");
  expect_index_error({{"weight_map", {{"a", 3}}}}, ": weight_map entry 'a' is not a file name");
  expect_index_error({{"metadata", {}}}, " has no weight_map object");
  expect_index_error({{"weight_map", nlohmann::json::object()}}, " has an empty weight_map");
  test::write_file(index_path, "{\"weight_map\": ");
  EXPECT_CONTAINS(error_of([&] { find_weight_files(unet); }), "'" + index_path + "' is not valid json");
}

TEST_F(Weights, RefusesPickledWeightsAndSaysHowToConvert) {
  const std::string unet = component_dir("pipe/unet");
  test::write_file(unet + "/diffusion_pytorch_model.bin", "not read");
  const std::string message = error_of([&] { find_weight_files(unet); });
  EXPECT_CONTAINS(
      message,
      "'" + unet +
          "' has only pickled weights (diffusion_pytorch_model.bin); dpinfer reads "
          "only safetensors, because loading a pickled .bin, .pt or .ckpt file can run arbitrary code");
  EXPECT_CONTAINS(message,
                  "from diffusers import DiffusionPipeline; DiffusionPipeline.from_pretrained('" +
                      dir_.file("pipe") + "').save_pretrained('" + dir_.file("pipe") +
                      "-safetensors', safe_serialization=True)");

  const std::string text = component_dir("pipe/text_encoder");
  test::write_file(text + "/pytorch_model.fp16.bin", "not read");
  EXPECT_CONTAINS(error_of([&] { find_weight_files(text, "fp16"); }),
                  "has only pickled weights (pytorch_model.fp16.bin)");
  test::write_file(text + "/model.ckpt", "not read");
  EXPECT_CONTAINS(error_of([&] { find_weight_files(text); }),
                  "has only pickled weights (model.ckpt, pytorch_model.fp16.bin)");

  // With safetensors beside it, the pickle is not looked at.
  write_safetensors(unet + "/diffusion_pytorch_model.safetensors", tiny_tensors());
  EXPECT_EQ(find_weight_files(unet).files[0], unet + "/diffusion_pytorch_model.safetensors");
}

TEST_F(Weights, ExplainsAMissingOrEmptyFolderAndBrokenLinks) {
  EXPECT_CONTAINS(error_of([&] { find_weight_files(dir_.file("nope")); }),
                  "component folder '" + dir_.file("nope") + "' does not exist");
  const std::string vae = component_dir("vae");
  EXPECT_CONTAINS(error_of([&] { find_weight_files(vae); }),
                  "'" + vae +
                      "' has no safetensors weights (looked for diffusion_pytorch_model.safetensors, "
                      "model.safetensors and their .safetensors.index.json); the folder is empty");
  fs::create_symlink("../blobs/0123abcd", vae + "/diffusion_pytorch_model.safetensors");
  EXPECT_CONTAINS(error_of([&] { find_weight_files(vae); }),
                  "'" + vae + "/diffusion_pytorch_model.safetensors' is a broken link");
}

TEST_F(Weights, FollowsSymlinksIntoBlobs) {
  const std::string blobs = component_dir("blobs");
  const std::string unet = component_dir("snapshot/unet");
  write_safetensors(blobs + "/feedbeef", tiny_tensors());
  fs::create_symlink("../../blobs/feedbeef", unet + "/diffusion_pytorch_model.safetensors");
  TinyModel model;
  load_weights(*model, find_weight_files(unet).files, {}, "unet");
  expect_tiny_values(model);
}

/// A module whose parameters are exactly `keys` (dotted names become nested modules),
/// zero-filled: stands in for the real models when checking fixture checkpoints.
std::shared_ptr<torch::nn::Module> module_with_keys(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& keys) {
  auto root = std::make_shared<torch::nn::Module>();
  for (const auto& [key, shape] : keys) {
    torch::nn::Module* node = root.get();
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
      const std::string part = key.substr(start, dot - start);
      auto children = node->named_children();
      auto* child = children.find(part);
      node = child ? child->get()
                   : node->register_module(part, std::make_shared<torch::nn::Module>()).get();
    }
    node->register_parameter(key.substr(start), torch::zeros(shape));
  }
  return root;
}

/// The reference values, read with nothing but the safetensors reader and from_blob.
void read_all(const std::vector<std::string>& files, std::map<std::string, torch::Tensor>& out) {
  for (const std::string& f : files) {
    auto st = io::SafetensorsFile::open(f);
    for (const auto& t : st->tensors()) {
      ASSERT_TRUE(t.dtype == io::Dtype::kF32 || t.dtype == io::Dtype::kF16) << t.name;
      auto dtype = t.dtype == io::Dtype::kF32 ? torch::kFloat : torch::kHalf;
      out[t.name] = torch::from_blob(const_cast<std::byte*>(t.data), t.shape, dtype).clone();
    }
  }
}

const std::string kPipelines = DPINFER_TEST_DATA_DIR "/pipelines";

TEST_F(Weights, LoadsTheLegacyNamedFixtureVae) {
  const std::string vae = kPipelines + "/tiny-3down/vae";
  if (!fs::exists(vae)) GTEST_SKIP() << vae << " is not there yet";
  const WeightFiles found = find_weight_files(vae);
  std::map<std::string, torch::Tensor> file_values;
  read_all(found.files, file_values);
  const std::map<std::string, std::string> modern{
      {".query.", ".to_q."}, {".key.", ".to_k."}, {".value.", ".to_v."}, {".proj_attn.", ".to_out.0."}};
  std::vector<std::pair<std::string, std::vector<int64_t>>> keys;
  std::map<std::string, std::string> source_of;
  for (const auto& [name, value] : file_values) {
    std::string key = name;
    for (const auto& [from, to] : modern)
      if (auto at = key.find(from); at != std::string::npos) key.replace(at, from.size(), to);
    keys.emplace_back(key, value.sizes().vec());
    source_of[key] = name;
  }
  ASSERT_TRUE(source_of.count("decoder.mid_block.attentions.0.to_out.0.weight"));
  auto module = module_with_keys(keys);
  load_weights(*module, found.files, find_model_class("AutoencoderKL")->renames, "vae");
  for (const auto& p : module->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), file_values.at(source_of.at(p.key())))) << p.key();
}

TEST_F(Weights, LoadsTheShardedFixtureUnet) {
  const std::string unet = kPipelines + "/tiny-3down/unet";
  if (!fs::exists(unet)) GTEST_SKIP() << unet << " is not there yet";
  const WeightFiles found = find_weight_files(unet);
  ASSERT_EQ(found.files.size(), 3u);
  std::map<std::string, torch::Tensor> file_values;
  read_all(found.files, file_values);
  std::vector<std::pair<std::string, std::vector<int64_t>>> keys;
  for (const auto& [name, value] : file_values) keys.emplace_back(name, value.sizes().vec());
  auto module = module_with_keys(keys);
  load_weights(*module, found.files, {}, "unet");
  for (const auto& p : module->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), file_values.at(p.key()))) << p.key();
}

TEST_F(Weights, LoadsTheFp16FixtureTextEncoderIntoF32) {
  const std::string text = kPipelines + "/tiny-sd2v/text_encoder";
  if (!fs::exists(text)) GTEST_SKIP() << text << " is not there yet";
  const WeightFiles fp16 = find_weight_files(text, "fp16");
  ASSERT_EQ(fp16.files, std::vector<std::string>{text + "/model.fp16.safetensors"});
  std::map<std::string, torch::Tensor> full;
  read_all(find_weight_files(text).files, full);
  std::vector<std::pair<std::string, std::vector<int64_t>>> keys;
  for (const auto& [name, value] : full) keys.emplace_back(name, value.sizes().vec());
  auto module = module_with_keys(keys);
  load_weights(*module, fp16.files, find_model_class("CLIPTextModel")->renames, "text_encoder");
  for (const auto& p : module->named_parameters()) {
    EXPECT_EQ(p.value().scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(p.value(), full.at(p.key()).to(torch::kHalf).to(torch::kFloat))) << p.key();
  }
}

// A config that promises more than the weights hold is refused by the key check on the meta
// device, before its parameters are allocated: a text encoder whose config says
// intermediate_size 2^34 would need 2 TiB per MLP weight in float32.
TEST_F(Weights, RefusesAConfigThatDisagreesWithTheWeightsBeforeAllocatingIt) {
  const std::string text = kPipelines + "/tiny-sdxl/text_encoder";
  Component c;
  c.name = "text_encoder";
  c.library = "transformers";
  c.class_name = "CLIPTextModel";
  c.path = text;
  std::ifstream in(text + "/config.json");
  c.config = nlohmann::json::parse(in);
  c.config["intermediate_size"] = int64_t{1} << 34;
  const std::string message =
      error_of([&] { load_component(c, torch::TensorOptions().dtype(torch::kFloat)); });
  EXPECT_CONTAINS(message, "component 'text_encoder': the weights in '" + text + "/model.safetensors' do not "
                           "match the model: 15 of the wrong shape "
                           "(text_model.encoder.layers.0.mlp.fc1.bias is [37] in the file but [17179869184] "
                           "in the model");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

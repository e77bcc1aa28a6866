// `dpinfer inspect`: the facts it reports on the three tiny fixture pipelines, the errors
// of broken copies of them (each the very message loading the pipeline fails with), and the
// real binary's output and exit statuses.
#include <gtest/gtest.h>

#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarType.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/util/error.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kPipelines = DPINFER_TEST_DATA_DIR "/pipelines";

/// One tensor of a safetensors file, with its raw bytes.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::vector<Entry> read_entries(const std::string& path) {
  std::vector<Entry> out;
  auto file = io::SafetensorsFile::open(path);
  for (const io::TensorView& t : file->tensors())
    out.push_back({t.name, std::string(io::dtype_name(t.dtype)), t.shape,
                   std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
  return out;
}

/// Writes `entries` as the reference writer does (header padded to 8 bytes).
void write_entries(const std::string& path, const std::vector<Entry>& entries) {
  json header = json::object();
  std::string data;
  for (const Entry& e : entries) {
    const size_t begin = data.size();
    data += e.bytes;
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  test::write_file(path, bytes + text + data);
}

void edit_entries(const std::string& path, const std::function<void(std::vector<Entry>&)>& edit) {
  std::vector<Entry> entries = read_entries(path);
  edit(entries);
  write_entries(path, entries);
}

json read_json(const std::string& path) { return json::parse(test::read_file(path)); }

json facts(const ComponentReport& c) { return json::parse(c.config.dump()); }
json as_json(const InspectReport& r) { return json::parse(r.to_json().dump()); }

/// Element counts per dtype and in all, straight from the files' headers.
std::map<std::string, int64_t> header_counts(const std::vector<std::string>& files, int64_t* total) {
  std::map<std::string, int64_t> counts;
  *total = 0;
  for (const std::string& path : files) {
    for (const Entry& e : read_entries(path)) {
      int64_t n = 1;
      for (int64_t d : e.shape) n *= d;
      counts[e.dtype] += n;
      *total += n;
    }
  }
  return counts;
}

/// What loading the pipeline fails with, or "" when it loads.
std::string load_error(const std::string& model, const std::string& variant = "", const std::string& scheduler = "") {
  LoadRequest o;
  o.model = model;
  o.variant = variant;
  o.scheduler = scheduler;
  try {
    load_text_to_image(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void expect_weights_match_headers(const ComponentReport& c) {
  SCOPED_TRACE(c.name);
  ASSERT_FALSE(c.files.empty());
  int64_t total = 0;
  const std::map<std::string, int64_t> counts = header_counts(c.files, &total);
  EXPECT_EQ(c.parameters, total);
  ASSERT_EQ(c.dtypes.size(), counts.size());
  for (const auto& [dtype, n] : counts) EXPECT_EQ(c.dtypes.at(dtype).parameters, n) << dtype;
  ASSERT_TRUE(c.keys.has_value());
  EXPECT_TRUE(c.keys->ok());
  EXPECT_GT(c.keys->matched, 0u);
  EXPECT_TRUE(c.error.empty()) << c.error;
}

#define EXPECT_ONE_LINE_CONTAINS(haystack, needle)                         \
  do {                                                                     \
    const std::string h_ = (haystack);                                     \
    EXPECT_NE(h_.find(needle), std::string::npos) << "in: " << h_;         \
    EXPECT_EQ(h_.find('\n'), std::string::npos) << "not one line: " << h_; \
  } while (0)

TEST(Inspect, ReportsTheSd1Fixture) {
  const std::string root = kPipelines + "/tiny-sd1";
  const InspectReport r = inspect_model(root);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.root, fs::absolute(root).lexically_normal().string());
  EXPECT_EQ(r.pipeline, "StableDiffusionPipeline");

  EXPECT_EQ(r.component("text_encoder").class_name, "CLIPTextModel");
  EXPECT_EQ(r.component("text_encoder").library, "transformers");
  EXPECT_EQ(facts(r.component("text_encoder"))["num_hidden_layers"], 3);
  EXPECT_EQ(facts(r.component("text_encoder"))["hidden_size"], 32);
  EXPECT_EQ(facts(r.component("text_encoder"))["hidden_act"], "quick_gelu");
  EXPECT_EQ(facts(r.component("text_encoder"))["vocab_size"], 1514);

  EXPECT_EQ(r.component("unet").class_name, "UNet2DConditionModel");
  EXPECT_EQ(facts(r.component("unet"))["down_block_types"], json({"CrossAttnDownBlock2D", "DownBlock2D"}));
  EXPECT_EQ(facts(r.component("unet"))["up_block_types"], json({"UpBlock2D", "CrossAttnUpBlock2D"}));
  EXPECT_EQ(facts(r.component("unet"))["mid_block_type"], "UNetMidBlock2DCrossAttn");
  EXPECT_EQ(facts(r.component("unet"))["block_out_channels"], json({16, 24}));
  EXPECT_EQ(facts(r.component("unet"))["num_attention_heads"], json({8, 8}));  // attention_head_dim 8, read as heads
  EXPECT_EQ(facts(r.component("unet"))["cross_attention_dim"], json({32, 32}));
  EXPECT_EQ(facts(r.component("unet"))["use_linear_projection"], false);
  EXPECT_EQ(facts(r.component("unet"))["sample_size"], json({8, 8}));

  EXPECT_EQ(facts(r.component("vae"))["block_out_channels"], json({4, 8, 8, 8}));
  EXPECT_EQ(facts(r.component("vae"))["latent_channels"], 4);
  EXPECT_EQ(facts(r.component("vae"))["scale_factor"], 8);
  EXPECT_DOUBLE_EQ(facts(r.component("vae"))["scaling_factor"].get<double>(), 0.18215);
  EXPECT_EQ(facts(r.component("vae"))["tiling"], "64 px tiles (8 latents) with --vae-tiling");
  ASSERT_TRUE(r.default_size.has_value());
  EXPECT_EQ(*r.default_size, (std::array<int64_t, 2>{64, 64}));  // 8 latents x 8

  for (const ComponentReport* c : {&r.component("text_encoder"), &r.component("unet"), &r.component("vae")}) {
    expect_weights_match_headers(*c);
    EXPECT_TRUE(c->variant.empty());
    EXPECT_FALSE(c->fell_back);
    EXPECT_TRUE(c->index.empty());
    EXPECT_EQ(c->dtypes.count("F32"), 1u);
  }
  EXPECT_EQ(r.component("unet").files, std::vector<std::string>{r.root + "/unet/diffusion_pytorch_model.safetensors"});
  EXPECT_EQ(r.component("text_encoder").files, std::vector<std::string>{r.root + "/text_encoder/model.safetensors"});

  const size_t vocab_entries = read_json(root + "/tokenizer/vocab.json").size();
  EXPECT_EQ(r.tokenizer().vocab_size, vocab_entries);
  EXPECT_EQ(r.tokenizer().model_max_length, 77);
  EXPECT_EQ(r.tokenizer().special("bos").token, "<|startoftext|>");
  EXPECT_EQ(r.tokenizer().special("bos").id, 1512);
  EXPECT_EQ(r.tokenizer().special("eos").token, "<|endoftext|>");
  EXPECT_EQ(r.tokenizer().special("eos").id, 1513);
  EXPECT_EQ(r.tokenizer().special("pad").token, "<|endoftext|>");
  EXPECT_EQ(r.tokenizer().special("pad").id, 1513);

  EXPECT_EQ(r.scheduler.class_name, "PNDMScheduler");
  EXPECT_EQ(r.scheduler.dpinfer_name, "pndm");
  EXPECT_EQ(r.scheduler.prediction_type, "");  // not in the config: epsilon
  EXPECT_EQ(r.scheduler.timestep_spacing, "");
  EXPECT_TRUE(r.scheduler.error.empty());

  // The modules are built in float16 for the key check only; the process default stays.
  EXPECT_EQ(c10::get_default_dtype_as_scalartype(), c10::ScalarType::Float);
}

// --scheduler-set: the keys are in the config the report reads, and refused as generate refuses them.
TEST(Inspect, SchedulerSetKeysAreAppliedAndChecked) {
  const std::string root = kPipelines + "/tiny-sdxl";
  const InspectReport set = inspect_model(root, "", "", {}, {}, json{{"timestep_spacing", "trailing"}});
  EXPECT_TRUE(set.ok()) << set.error;
  EXPECT_EQ(set.scheduler.timestep_spacing, "trailing");
  EXPECT_EQ(set.scheduler.dpinfer_name, "euler");
  EXPECT_EQ(set.scheduler.settings, json({{"timestep_spacing", "trailing"}}));
  EXPECT_NE(set.to_text().find("  --scheduler-set timestep_spacing=\"trailing\"\n"), std::string::npos) << set.to_text();
  EXPECT_EQ(set.to_json()["components"]["scheduler"]["scheduler_settings"].dump(), R"({"timestep_spacing":"trailing"})");
  EXPECT_EQ(inspect_model(root).scheduler.timestep_spacing, "leading");  // the model's own

  const InspectReport misspelt = inspect_model(root, "", "", {}, {}, json{{"timestep_spaceing", "trailing"}});
  EXPECT_FALSE(misspelt.ok());
  EXPECT_TRUE(misspelt.bad_input);
  EXPECT_NE(misspelt.scheduler.error.find("--scheduler-set timestep_spaceing: not a parameter of diffusers' "
                                          "EulerDiscreteScheduler"),
            std::string::npos)
      << misspelt.scheduler.error;
}

TEST(Inspect, ReportsTheSd2FixtureWithAndWithoutItsFp16TextEncoder) {
  const std::string root = kPipelines + "/tiny-sd2v";
  const InspectReport plain = inspect_model(root);
  ASSERT_TRUE(plain.ok()) << plain.error;
  EXPECT_EQ(plain.component("text_encoder").files, std::vector<std::string>{plain.root + "/text_encoder/model.safetensors"});
  EXPECT_EQ(plain.component("text_encoder").dtypes.count("F16"), 0u);

  const InspectReport r = inspect_model(root, "fp16");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.variant, "fp16");
  EXPECT_EQ(r.component("text_encoder").files, std::vector<std::string>{r.root + "/text_encoder/model.fp16.safetensors"});
  EXPECT_EQ(r.component("text_encoder").variant, "fp16");
  EXPECT_FALSE(r.component("text_encoder").fell_back);
  ASSERT_EQ(r.component("text_encoder").dtypes.count("F16"), 1u);
  EXPECT_EQ(r.component("text_encoder").dtypes.at("F16").parameters, plain.component("text_encoder").parameters);
  for (const ComponentReport* c : {&r.component("unet"), &r.component("vae")}) {
    EXPECT_TRUE(c->variant.empty()) << c->name;
    EXPECT_TRUE(c->fell_back) << c->name;
  }
  for (const ComponentReport* c : {&r.component("text_encoder"), &r.component("unet"), &r.component("vae")}) expect_weights_match_headers(*c);

  EXPECT_EQ(facts(r.component("text_encoder"))["hidden_act"], "gelu");
  EXPECT_EQ(facts(r.component("text_encoder"))["num_hidden_layers"], 2);
  EXPECT_EQ(facts(r.component("unet"))["use_linear_projection"], true);
  EXPECT_EQ(facts(r.component("unet"))["num_attention_heads"], json({2, 4}));
  EXPECT_EQ(facts(r.component("unet"))["block_out_channels"], json({8, 16}));
  EXPECT_EQ(facts(r.component("vae"))["scale_factor"], 2);
  EXPECT_EQ(*r.default_size, (std::array<int64_t, 2>{32, 32}));  // 16 latents x 2
  EXPECT_EQ(r.tokenizer().special("pad").token, "!");
  EXPECT_EQ(r.tokenizer().special("pad").id, 0);
  EXPECT_EQ(r.tokenizer().special("eos").id, 1013);
  EXPECT_EQ(r.scheduler.class_name, "DDIMScheduler");
  EXPECT_EQ(r.scheduler.dpinfer_name, "ddim");
  EXPECT_EQ(r.scheduler.prediction_type, "v_prediction");
}

TEST(Inspect, ReportsTheShardedUnetAndLegacyVaeNamesOfThe3DownFixture) {
  const std::string root = kPipelines + "/tiny-3down";
  const InspectReport r = inspect_model(root);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.component("unet").index, r.root + "/unet/diffusion_pytorch_model.safetensors.index.json");
  EXPECT_EQ(r.component("unet").files.size(), 3u);
  for (const ComponentReport* c : {&r.component("text_encoder"), &r.component("unet"), &r.component("vae")}) expect_weights_match_headers(*c);
  // The VAE file has the deprecated attention names; the renames make them match.
  bool legacy = false;
  for (const Entry& e : read_entries(r.component("vae").files.at(0))) legacy = legacy || e.name.find(".query.") != std::string::npos;
  EXPECT_TRUE(legacy);
  EXPECT_TRUE(r.component("vae").keys->unexpected.empty());
  EXPECT_EQ(facts(r.component("unet"))["down_block_types"],
            json({"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"}));
  EXPECT_EQ(facts(r.component("unet"))["sample_size"], json({8, 12}));
  EXPECT_EQ(*r.default_size, (std::array<int64_t, 2>{32, 48}));  // {height, width}: 8x12 latents x 4
  EXPECT_EQ(r.scheduler.dpinfer_name, "euler");
  EXPECT_EQ(r.scheduler.timestep_spacing, "leading");
  EXPECT_EQ(r.scheduler.prediction_type, "epsilon");

  const json j = as_json(r);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["default_size"], json({{"width", 48}, {"height", 32}}));
  EXPECT_EQ(j["components"]["unet"]["weights"]["files"].size(), 3u);
  EXPECT_EQ(j["components"]["vae"]["keys"]["unexpected_count"], 0);
  EXPECT_EQ(j["components"]["tokenizer"]["bos"], json({{"token", "<|startoftext|>"}, {"id", 1012}}));
  EXPECT_EQ(j["components"]["scheduler"]["dpinfer_name"], "euler");
}

/// A copy of a fixture pipeline to break.
class InspectBroken : public ::testing::Test {
 protected:
  std::string copy(const std::string& fixture) {
    const std::string root = dir_.file(fixture);
    fs::copy(kPipelines + "/" + fixture, root, fs::copy_options::recursive);
    return root;
  }

  /// Inspects `root`, which must fail with the error loading fails with, naming `needle`.
  InspectReport expect_fails_as_loading(const std::string& root, const std::string& needle,
                                        const std::string& variant = "") {
    const InspectReport r = inspect_model(root, variant);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(r.bad_input);
    EXPECT_EQ(r.error, load_error(root, variant));
    EXPECT_ONE_LINE_CONTAINS(r.error, needle);
    return r;
  }

  test::TempDir dir_;
};

TEST_F(InspectBroken, ARenamedTensorIsMissingAndUnexpected) {
  const std::string root = copy("tiny-sd1");
  const std::string file = root + "/unet/diffusion_pytorch_model.safetensors";
  edit_entries(file, [](std::vector<Entry>& entries) {
    for (Entry& e : entries)
      if (e.name == "conv_in.weight") e.name = "conv_in.weights";
  });
  const InspectReport r = expect_fails_as_loading(
      root, "component 'unet': the weights in '" + file +
                "' do not match the model: 1 missing (conv_in.weight), 1 unexpected (conv_in.weights)");
  ASSERT_TRUE(r.component("unet").keys.has_value());
  EXPECT_EQ(r.component("unet").keys->missing, std::vector<std::string>{"conv_in.weight"});
  EXPECT_EQ(r.component("unet").keys->unexpected, std::vector<std::string>{"conv_in.weights"});
  EXPECT_EQ(r.component("unet").error, r.error);
  // The other components are still checked.
  EXPECT_TRUE(r.component("text_encoder").keys && r.component("text_encoder").keys->ok());
  EXPECT_TRUE(r.component("vae").keys && r.component("vae").keys->ok());
  EXPECT_EQ(r.scheduler.dpinfer_name, "pndm");
  const json j = as_json(r);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["error"], r.error);
  EXPECT_EQ(j["components"]["unet"]["keys"]["missing"], json({"conv_in.weight"}));
  EXPECT_EQ(j["components"]["unet"]["keys"]["missing_count"], 1);
}

TEST_F(InspectBroken, AMissingTensor) {
  const std::string root = copy("tiny-sd1");
  edit_entries(root + "/vae/diffusion_pytorch_model.safetensors", [](std::vector<Entry>& entries) {
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [](const Entry& e) { return e.name == "post_quant_conv.bias"; }),
                  entries.end());
  });
  const InspectReport r = expect_fails_as_loading(root, "component 'vae': the weights in '");
  EXPECT_ONE_LINE_CONTAINS(r.error, "do not match the model: 1 missing (post_quant_conv.bias); check that");
  EXPECT_EQ(r.component("vae").keys->missing, std::vector<std::string>{"post_quant_conv.bias"});
}

TEST_F(InspectBroken, AnExtraTensor) {
  const std::string root = copy("tiny-sd2v");
  const std::string file = root + "/text_encoder/model.fp16.safetensors";
  edit_entries(file, [](std::vector<Entry>& entries) {
    entries.push_back({"text_model.extra.weight", "F16", {2}, std::string(4, '\0')});
  });
  const InspectReport r = expect_fails_as_loading(
      root, "component 'text_encoder': the weights in '" + file +
                "' do not match the model: 1 unexpected (text_model.extra.weight)",
      "fp16");
  EXPECT_EQ(r.component("text_encoder").dtypes.at("F16").tensors, static_cast<int64_t>(read_entries(file).size()));
  // Without the variant the plain weights are used, and they are fine.
  EXPECT_TRUE(inspect_model(root).ok());
}

TEST_F(InspectBroken, ATensorOfTheWrongShape) {
  const std::string root = copy("tiny-3down");
  const std::string shard = root + "/unet/diffusion_pytorch_model-00001-of-00003.safetensors";
  std::string changed;
  edit_entries(shard, [&](std::vector<Entry>& entries) {
    for (Entry& e : entries) {
      if (e.shape.size() == 2 && e.shape[0] != e.shape[1] && changed.empty()) {
        std::swap(e.shape[0], e.shape[1]);
        changed = e.name + " is [" + std::to_string(e.shape[0]) + "," + std::to_string(e.shape[1]) +
                  "] in the file but [" + std::to_string(e.shape[1]) + "," + std::to_string(e.shape[0]) +
                  "] in the model";
      }
    }
  });
  ASSERT_FALSE(changed.empty());
  const InspectReport r = expect_fails_as_loading(
      root, "component 'unet': the weights in 3 files from '" + shard + "' on do not match the model: " +
                "1 of the wrong shape (" + changed + ")");
  EXPECT_EQ(r.component("unet").keys->mismatched, std::vector<std::string>{changed});
}

TEST_F(InspectBroken, PickledWeightsInsteadOfSafetensors) {
  const std::string root = copy("tiny-sd1");
  fs::rename(root + "/unet/diffusion_pytorch_model.safetensors", root + "/unet/diffusion_pytorch_model.bin");
  const InspectReport r = expect_fails_as_loading(
      root, "'" + root + "/unet' has only pickled weights (diffusion_pytorch_model.bin); dpinfer reads only "
                         "safetensors");
  EXPECT_TRUE(r.component("unet").files.empty());
  EXPECT_FALSE(r.component("unet").keys.has_value());
}

TEST_F(InspectBroken, AnotherPipelineClass) {
  const std::string root = copy("tiny-sd1");
  json index = read_json(root + "/model_index.json");
  index["_class_name"] = "HunyuanDiTPipeline";
  test::write_file(root + "/model_index.json", index.dump(2));
  const InspectReport r = expect_fails_as_loading(
      root, "model_index.json': HunyuanDiTPipeline is not supported yet; supported: StableDiffusionPipeline, StableDiffusionInpaintPipeline, "
            "StableDiffusionXLPipeline");
  // What the directory is, though no family serves it.
  EXPECT_EQ(r.root, root);
  EXPECT_EQ(r.pipeline, "HunyuanDiTPipeline");
  EXPECT_TRUE(r.family.empty());
  const json j = as_json(r);
  EXPECT_EQ(j["ok"], false);
  EXPECT_FALSE(j.contains("components"));
}

TEST_F(InspectBroken, ReportsTheErrorLoadingStopsAtFirst) {
  // The pipeline parses every config before it loads any weights: a bad unet config
  // comes first even though the text encoder's weights, loaded first, are broken too.
  const std::string root = copy("tiny-sd1");
  edit_entries(root + "/text_encoder/model.safetensors", [](std::vector<Entry>& entries) { entries.pop_back(); });
  json config = read_json(root + "/unet/config.json");
  config["down_block_types"] = {"CrossAttnDownBlock2D", "SimpleCrossAttnDownBlock2D"};
  test::write_file(root + "/unet/config.json", config.dump(2));
  const InspectReport r = expect_fails_as_loading(root, "SimpleCrossAttnDownBlock2D");
  EXPECT_EQ(r.component("unet").error, r.error);
  EXPECT_FALSE(r.component("unet").keys.has_value());
  EXPECT_FALSE(r.default_size.has_value());
  EXPECT_FALSE(r.component("text_encoder").error.empty());
  EXPECT_NE(r.component("text_encoder").error, r.error);
  EXPECT_ONE_LINE_CONTAINS(r.component("text_encoder").error, "component 'text_encoder': the weights in '");
}

// The problems of several components, each reported with its component, in one report.
// Before, resolve_model() stopped at the first broken component and the report said
// nothing past "model:".
TEST_F(InspectBroken, ReportsABrokenConfigAndAMissingTokenizerFileAtOnce) {
  const std::string root = copy("tiny-sd1");
  test::write_file(root + "/vae/config.json", "{");
  fs::remove(root + "/tokenizer/merges.txt");
  // The tokenizer comes before the VAE in model_index.json's checks: its error is the first.
  const InspectReport r = expect_fails_as_loading(root, "merges.txt' is missing: component 'tokenizer' needs it");
  EXPECT_EQ(r.tokenizer().error, r.error);
  EXPECT_ONE_LINE_CONTAINS(r.component("vae").error, "'" + root + "/vae/config.json' is not valid json");
  EXPECT_EQ(r.root, root);
  EXPECT_EQ(r.pipeline, "StableDiffusionPipeline");
  // The VAE's weights are still read, though without a config nothing can check their keys.
  EXPECT_EQ(r.component("vae").class_name, "AutoencoderKL");
  EXPECT_GT(r.component("vae").parameters, 0);
  EXPECT_FALSE(r.component("vae").keys.has_value());
  EXPECT_FALSE(r.default_size.has_value());
  // The components that are fine are reported in full.
  expect_weights_match_headers(r.component("text_encoder"));
  expect_weights_match_headers(r.component("unet"));
  EXPECT_EQ(r.scheduler.dpinfer_name, "pndm");

  const std::string text = r.to_text();
  EXPECT_NE(text.find("  error: " + r.tokenizer().error + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  error: " + r.component("vae").error + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("unet: UNet2DConditionModel (diffusers)"), std::string::npos) << text;
  const json j = as_json(r);
  EXPECT_EQ(j["path"], root);
  EXPECT_EQ(j["components"]["tokenizer"]["error"], r.tokenizer().error);
  EXPECT_EQ(j["components"]["vae"]["error"], r.component("vae").error);
  EXPECT_EQ(j["components"]["unet"]["keys"]["ok"], true);
}

TEST_F(InspectBroken, ReportsAMissingTokenizerFileAndAWrongShapeUnetTensorAtOnce) {
  const std::string root = copy("tiny-sd1");
  fs::remove(root + "/tokenizer/merges.txt");
  edit_entries(root + "/unet/diffusion_pytorch_model.safetensors", [](std::vector<Entry>& entries) {
    for (Entry& e : entries)
      if (e.name == "conv_in.bias") e.shape = {e.shape[0] / 2, 2};
  });
  const InspectReport r = expect_fails_as_loading(root, "merges.txt' is missing");
  ASSERT_TRUE(r.component("unet").keys.has_value());
  ASSERT_EQ(r.component("unet").keys->mismatched.size(), 1u);
  EXPECT_EQ(r.component("unet").keys->mismatched[0].rfind("conv_in.bias is [", 0), 0u) << r.component("unet").keys->mismatched[0];
  EXPECT_ONE_LINE_CONTAINS(r.component("unet").error, "component 'unet': the weights in '");
  EXPECT_ONE_LINE_CONTAINS(r.component("unet").error, "1 of the wrong shape (conv_in.bias is [");
  EXPECT_NE(r.to_text().find("    of the wrong shape: 1 (conv_in.bias is ["), std::string::npos) << r.to_text();
}

TEST_F(InspectBroken, ReportsEverythingElseWhenOnlyTheUnetConfigIsBroken) {
  const std::string root = copy("tiny-sd1");
  test::write_file(root + "/unet/config.json", "{\"_class_name\": ");
  const InspectReport r = expect_fails_as_loading(root, "'" + root + "/unet/config.json' is not valid json");
  EXPECT_EQ(r.component("unet").error, r.error);
  EXPECT_EQ(r.component("unet").path, root + "/unet");
  EXPECT_GT(r.component("unet").parameters, 0);
  expect_weights_match_headers(r.component("text_encoder"));
  expect_weights_match_headers(r.component("vae"));
  EXPECT_EQ(r.tokenizer().model_max_length, 77);

  for (const bool as_json_flag : {false, true}) {
    std::vector<std::string> argv{test::dpinfer_binary(), "inspect", root};
    if (as_json_flag) argv.push_back("--json");
    const test::RunResult run = test::run(argv);
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(run.err, "error: " + r.error + "\n");
    if (as_json_flag) {
      const json j = json::parse(run.out);
      EXPECT_EQ(j["path"], root);
      EXPECT_EQ(j["pipeline"], "StableDiffusionPipeline");
      EXPECT_EQ(j["components"]["unet"]["error"], r.error);
      EXPECT_EQ(j["components"]["vae"]["keys"]["ok"], true);
      EXPECT_EQ(j["components"]["scheduler"]["dpinfer_name"], "pndm");
    } else {
      EXPECT_NE(run.out.find("path: " + root + "\n"), std::string::npos) << run.out;
      EXPECT_NE(run.out.find("unet: UNet2DConditionModel (diffusers)\n  folder: " + root + "/unet\n"),
                std::string::npos)
          << run.out;
      EXPECT_NE(run.out.find("  error: " + r.error + "\n"), std::string::npos) << run.out;
      EXPECT_NE(run.out.find("vae: AutoencoderKL (diffusers)"), std::string::npos) << run.out;
      EXPECT_NE(run.out.find("fails: the model does not load"), std::string::npos) << run.out;
    }
  }
}

TEST_F(InspectBroken, ReportsAComponentModelIndexLacksAndAVariantNoComponentHas) {
  const std::string root = copy("tiny-sd1");
  json index = read_json(root + "/model_index.json");
  index.erase("vae");
  test::write_file(root + "/model_index.json", index.dump(2));
  const InspectReport r = expect_fails_as_loading(root, "has no 'vae' component", "fp16");
  EXPECT_EQ(r.component("vae").error, r.error);
  EXPECT_TRUE(r.component("vae").path.empty());
  EXPECT_TRUE(r.component("vae").files.empty());
  EXPECT_ONE_LINE_CONTAINS(r.variant_error, "has no fp16 weights in unet, text_encoder or vae");
  for (const ComponentReport* c : {&r.component("text_encoder"), &r.component("unet")}) {
    expect_weights_match_headers(*c);
    EXPECT_TRUE(c->fell_back);
  }
  const std::string text = r.to_text();
  EXPECT_NE(text.find("variant: fp16\n  error: " + r.variant_error + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nvae: ?\n  error: " + r.error + "\n"), std::string::npos) << text;
  EXPECT_EQ(as_json(r)["variant_error"], r.variant_error);
}

// A scheduler class dpinfer lacks: generate runs with --scheduler, and so does inspect.
TEST_F(InspectBroken, AnUnsupportedSchedulerClassLoadsWithSchedulerGiven) {
  const std::string root = copy("tiny-sd1");
  json config = read_json(root + "/scheduler/scheduler_config.json");
  config["_class_name"] = "HeunDiscreteScheduler";
  test::write_file(root + "/scheduler/scheduler_config.json", config.dump(2));
  const InspectReport own = expect_fails_as_loading(root, "_class_name 'HeunDiscreteScheduler' is not supported");
  EXPECT_EQ(own.scheduler.error, own.error);

  ASSERT_EQ(load_error(root, "", "euler"), "");
  const InspectReport r = inspect_model(root, "", "euler");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.scheduler.class_name, "HeunDiscreteScheduler");
  EXPECT_EQ(r.scheduler.requested, "euler");
  EXPECT_EQ(r.scheduler.dpinfer_name, "euler");
  EXPECT_EQ(as_json(r)["components"]["scheduler"]["requested"], "euler");
  // dpm++2m-karras is a name of its own, not the config's class.
  EXPECT_EQ(inspect_model(root, "", "dpm++2m-karras").scheduler.dpinfer_name, "dpm++2m-karras");

  const InspectReport bad = inspect_model(root, "", "heun");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.error, load_error(root, "", "heun"));
  EXPECT_ONE_LINE_CONTAINS(bad.error, "unknown scheduler 'heun'; valid: pndm, ddim, euler");
  EXPECT_EQ(bad.scheduler.error, bad.error);

  const test::RunResult text = test::run({test::dpinfer_binary(), "inspect", root, "--scheduler", "euler"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("scheduler: HeunDiscreteScheduler (dpinfer euler, from --scheduler)\n"), std::string::npos)
      << text.out;
  const test::RunResult js = test::run({test::dpinfer_binary(), "inspect", "--scheduler", "euler", root, "--json"});
  EXPECT_EQ(js.exit_code, 0) << js.err;
  EXPECT_EQ(json::parse(js.out), as_json(r));
  const test::RunResult unknown = test::run({test::dpinfer_binary(), "inspect", root, "--scheduler", "heun"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err, "error: " + bad.error + "\n");
  EXPECT_NE(unknown.out.find("scheduler: HeunDiscreteScheduler (--scheduler heun)\n"), std::string::npos)
      << unknown.out;
  const test::RunResult without = test::run({test::dpinfer_binary(), "inspect", root});
  EXPECT_EQ(without.exit_code, 2);
  EXPECT_EQ(without.err, "error: " + own.error + "\n");
}

/// The real binaries: `dpinfer inspect` execs `dpinfer-worker inspect`.
class InspectBinary : public InspectBroken {};

TEST_F(InspectBinary, ExitsZeroWithTheReportOnStdout) {
  const std::string root = kPipelines + "/tiny-3down";
  const test::RunResult text = test::run({test::dpinfer_binary(), "inspect", root});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.err, "");
  EXPECT_NE(text.out.find("unet: UNet2DConditionModel (diffusers)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("default_size: 48x32 (width x height)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("scheduler: EulerDiscreteScheduler (dpinfer euler)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ok: the model loads"), std::string::npos) << text.out;

  const test::RunResult js = test::run({test::dpinfer_binary(), "inspect", root, "--json"});
  EXPECT_EQ(js.exit_code, 0) << js.err;
  const json j = json::parse(js.out);
  EXPECT_EQ(j, as_json(inspect_model(root)));
}

TEST_F(InspectBinary, ExitsTwoWithTheLoadErrorOnOneLine) {
  const std::string root = copy("tiny-sd1");
  const std::string file = root + "/unet/diffusion_pytorch_model.safetensors";
  edit_entries(file, [](std::vector<Entry>& entries) {
    entries.push_back({"extra.weight", "F32", {1}, std::string(4, '\0')});
  });
  const std::string expected = load_error(root);
  ASSERT_NE(expected, "");
  for (const bool as_json : {false, true}) {
    std::vector<std::string> argv{test::dpinfer_binary(), "inspect", root};
    if (as_json) argv.push_back("--json");
    const test::RunResult r = test::run(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, "error: " + expected + "\n");
    if (as_json) {
      const json j = json::parse(r.out);
      EXPECT_EQ(j["ok"], false);
      EXPECT_EQ(j["error"], expected);
    } else {
      EXPECT_NE(r.out.find("    unexpected: 1 (extra.weight)\n"), std::string::npos) << r.out;
    }
  }

  const test::RunResult none = test::run({test::dpinfer_binary(), "inspect"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.err, "error: MODEL is required; see 'dpinfer inspect --help'\n");
  const test::RunResult extra = test::run({test::dpinfer_binary(), "inspect", root, "--bogus"});
  EXPECT_EQ(extra.exit_code, 2);
  EXPECT_EQ(extra.err, "error: the following argument was not expected: --bogus; see 'dpinfer inspect --help'\n");
  // In the order given (CLI11 2.1 itself lists them back to front).
  const test::RunResult extras = test::run({test::dpinfer_binary(), "inspect", root, "first", "second", "third"});
  EXPECT_EQ(extras.exit_code, 2);
  EXPECT_EQ(extras.err,
            "error: the following arguments were not expected: first second third; see 'dpinfer inspect --help'\n");
  const test::RunResult missing = test::run({test::dpinfer_binary(), "inspect", dir_.file("nowhere")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err, "error: " + load_error(dir_.file("nowhere")) + "\n");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

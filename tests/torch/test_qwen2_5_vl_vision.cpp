// Qwen2.5-VL's vision side (issue 29, Qwen-Image-Edit) against transformers 4.57.6 (with torchvision 0.26), on the
// tiny models of tools/fixtures/make_qwen2_5_vl_vision_goldens.py: Qwen2VLImageProcessorFast's pixel_values and grids
// (an image resized up, down, and not at all), and the vision tower's output for each image alone, for all images in one call and
// for a two-frame grid, in fp32 and bf16; then each image's independence of the others, the loader's strict
// key check, and the one-line errors of bad configs and inputs.
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dpinfer/io/image_reader.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision_config.h"
#include "dpinfer/pipeline/models/vision/qwen2_vl_image_processor.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/model_goldens.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using nlohmann::json;
using test::GoldenFile;
using test::model_fixture_dir;

// Against transformers 4.57.6 on torch 2.11.0 every fp32 and bf16 output is bit-identical on this project's
// x86-64 CPUs (the same ATen calls in the same order). The bounds leave room for another BLAS or thread
// count: fp32 within 1e-6 relative L2, bf16 within a few bf16 roundings (1e-2).
constexpr double kFp32Tolerance = 1e-6;
constexpr double kBf16Tolerance = 1e-2;

const std::vector<std::string>& vision_fixtures() {
  static const std::vector<std::string> names = {"tiny-qwen2.5-vl-vision", "tiny-qwen2.5-vl-vision-alt"};
  return names;
}

json vision_cases(const std::string& name) {
  return io::read_json_file(model_fixture_dir(name) + ".golden/cases.json", "regenerate it");
}

GoldenFile vision_golden(const std::string& name) {
  return GoldenFile(model_fixture_dir(name) + ".golden/vision.safetensors");
}

Component vision_component(const std::string& name) {
  return test::fixture_component(name, "text_encoder", ComponentRole::kTextEncoder,
                                 "Qwen2_5_VLForConditionalGeneration");
}

std::vector<GridThw> grids_of(const at::Tensor& grid_thw) {  // [n, 3] int64
  std::vector<GridThw> out;
  for (int64_t i = 0; i < grid_thw.size(0); ++i)
    out.push_back({grid_thw[i][0].item<int64_t>(), grid_thw[i][1].item<int64_t>(), grid_thw[i][2].item<int64_t>()});
  return out;
}

using test::expect_close;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_one_line_error(const std::function<void()>& f, const std::string& fragment) {
  const std::string what = error_of(f);
  EXPECT_NE(what.find(fragment), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

// ---- Qwen2VLImageProcessor

TEST(Qwen2_5_VLVision, ProcessorMatchesTransformersBitForBit) {
  for (const std::string& name : vision_fixtures()) {
    const Qwen2VLImageProcessor processor(
        Qwen2VLImageProcessorConfig::from_file(model_fixture_dir(name) + "/preprocessor_config.json"));
    GoldenFile golden = vision_golden(name);
    for (const json& img : vision_cases(name).at("images")) {
      const std::string stem = img.at("name").get<std::string>();
      const io::RgbImageData image =
          io::read_rgb_image(model_fixture_dir(name) + ".golden/" + img.at("file").get<std::string>());
      ASSERT_EQ(image.width, img.at("width").get<int>());
      const Qwen2VLImageInput in = processor.preprocess(image);
      const std::vector<int64_t> grid = img.at("grid_thw").get<std::vector<int64_t>>();
      EXPECT_EQ(std::vector<int64_t>(in.grid_thw.begin(), in.grid_thw.end()), grid) << name << " " << stem;
      EXPECT_EQ(in.resized_width, img.at("resized")[0].get<int64_t>()) << name << " " << stem;
      EXPECT_EQ(in.resized_height, img.at("resized")[1].get<int64_t>()) << name << " " << stem;
      EXPECT_TRUE(at::equal(at::tensor(grid, at::kLong).view({1, 3}), golden[stem + ".image_grid_thw"]));
      const at::Tensor expected = golden[stem + ".pixel_values"];
      ASSERT_EQ(in.pixel_values.sizes(), expected.sizes()) << name << " " << stem;
      EXPECT_EQ(in.pixel_values.scalar_type(), at::kFloat);
      EXPECT_TRUE(at::equal(in.pixel_values, expected))
          << name << " " << stem << ": " << in.pixel_values.ne(expected).sum().item<int64_t>() << " values differ";
    }
  }
}

TEST(Qwen2_5_VLVision, SmartResizeAsTransformers) {
  // round() is half to even: 52 / 8 = 6.5 -> 6, 20 / 8 = 2.5 -> 2.
  EXPECT_EQ(qwen2_vl_smart_resize(52, 20, 8, 256, 1024), (std::array<int64_t, 2>{48, 16}));
  EXPECT_EQ(qwen2_vl_smart_resize(60, 20, 8, 256, 2048), (std::array<int64_t, 2>{64, 16}));  // 7.5 -> 8, 2.5 -> 2
  // Past max_pixels: floor of side / beta; below min_pixels: ceil of side * beta (values from transformers).
  EXPECT_EQ(qwen2_vl_smart_resize(60, 28, 8, 256, 1024), (std::array<int64_t, 2>{40, 16}));
  EXPECT_EQ(qwen2_vl_smart_resize(30, 45, 8, 256, 1024), (std::array<int64_t, 2>{24, 32}));
  EXPECT_EQ(qwen2_vl_smart_resize(9, 12, 8, 256, 1024), (std::array<int64_t, 2>{16, 24}));
  // Qwen-Image-Edit's processor (patch 14, merge 2, 3136 .. 12845056): 1024 x 1024 rounds to 1036 x 1036.
  EXPECT_EQ(qwen2_vl_smart_resize(1024, 1024, 28, 3136, 12845056), (std::array<int64_t, 2>{1036, 1036}));
  expect_one_line_error([] { qwen2_vl_smart_resize(1, 201, 28, 3136, 12845056); },
                        "aspect ratio must be smaller than 200");
  // transformers returns (0, 0) here and fails later; dpinfer refuses at once.
  expect_one_line_error([] { qwen2_vl_smart_resize(3, 3, 8, 0, 1024); }, "resizes to no pixels");
}

TEST(Qwen2_5_VLVision, ProcessorConfigsResolveAsTransformersReadsThem) {
  // Defaults, and transformers 4.57's reconciliation in Qwen2VLImageProcessorFast (from_pretrained of these files,
  // checked in Python): `size` gives the bounds, and min_pixels / max_pixels each override its edge.
  const Qwen2VLImageProcessorConfig d = Qwen2VLImageProcessorConfig::from_json(json::object());
  EXPECT_EQ(d.min_pixels, 3136);
  EXPECT_EQ(d.max_pixels, 1003520);
  EXPECT_EQ(d.patch_size, 14);
  const Qwen2VLImageProcessorConfig s = Qwen2VLImageProcessorConfig::from_json(
      json{{"size", {{"shortest_edge", 100}, {"longest_edge", 2000}}}});
  EXPECT_EQ(s.min_pixels, 100);
  EXPECT_EQ(s.max_pixels, 2000);
  const Qwen2VLImageProcessorConfig one = Qwen2VLImageProcessorConfig::from_json(
      json{{"size", {{"shortest_edge", 100}, {"longest_edge", 2000}}}, {"min_pixels", 300}});
  EXPECT_EQ(one.min_pixels, 300);
  EXPECT_EQ(one.max_pixels, 2000);
  const Qwen2VLImageProcessorConfig both = Qwen2VLImageProcessorConfig::from_json(
      json{{"size", {{"shortest_edge", 100}, {"longest_edge", 2000}}}, {"min_pixels", 300}, {"max_pixels", 5000}});
  EXPECT_EQ(both.min_pixels, 300);
  EXPECT_EQ(both.max_pixels, 5000);
  const Qwen2VLImageProcessorConfig scalar = Qwen2VLImageProcessorConfig::from_json(json{{"image_mean", 0.25}});
  EXPECT_EQ(scalar.image_mean, (std::array<double, 3>{0.25, 0.25, 0.25}));
  const Qwen2VLImageProcessorConfig alt = Qwen2VLImageProcessorConfig::from_file(
      model_fixture_dir("tiny-qwen2.5-vl-vision-alt") + "/preprocessor_config.json");
  EXPECT_EQ(alt.min_pixels, 64);
  EXPECT_EQ(alt.max_pixels, 400);
  EXPECT_EQ(alt.patch_size, 2);
  EXPECT_EQ(alt.image_std, (std::array<double, 3>{0.5, 0.5, 0.5}));
}

TEST(Qwen2_5_VLVision, ProcessorRefusesWhatItDoesNotImplement) {
  const auto bad = [](const json& j, const std::string& fragment) {
    const std::string what = error_of([&] { Qwen2VLImageProcessorConfig::from_json(j); });
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_THROW(Qwen2VLImageProcessorConfig::from_json(j), InputError) << fragment;
  };
  bad(json{{"resample", 2}}, "resample 2 is not supported");
  bad(json{{"size", {{"height", 10}, {"width", 10}}}}, "size must contain 'shortest_edge' and 'longest_edge'");
  bad(json{{"image_std", {0.5, 0.0, 0.5}}}, "image_std[1]");
  bad(json{{"image_mean", {0.5, 0.5}}}, "image_mean must be a number or a list of 3 numbers");
  bad(json{{"image_processor_type", "SiglipImageProcessor"}}, "image_processor_type");
  bad(json{{"patch_size", 0}}, "patch_size");
  bad(json{{"max_pixels", -5}}, "max_pixels");
  bad(json{{"do_resize", "yes"}}, "do_resize");
  // Without resizing the sides must already be whole merged patches.
  Qwen2VLImageProcessorConfig c;
  c.do_resize = false;
  c.patch_size = 2;
  io::RgbImageData image;
  image.width = 6;
  image.height = 4;
  image.pixels.assign(6 * 4 * 3, 128);
  expect_one_line_error([&] { Qwen2VLImageProcessor(c).preprocess(image); },
                        "multiples of patch_size * merge_size = 4");
  image.width = 8;
  image.pixels.assign(8 * 4 * 3, 128);
  const Qwen2VLImageInput in = Qwen2VLImageProcessor(c).preprocess(image);
  EXPECT_EQ(in.grid_thw, (std::array<int64_t, 3>{1, 2, 4}));
  EXPECT_EQ(in.pixel_values.sizes(), (std::vector<int64_t>{8, 3 * 2 * 2 * 2}));
}

// ---- The vision tower

class Qwen2_5_VLVisionGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen2_5_VLVisionGoldens, OutputsMatchTransformers) {
  c10::InferenceMode guard;
  const std::string name = GetParam();
  GoldenFile golden = vision_golden(name);
  const json cases = vision_cases(name);
  for (const auto& [dtype, dname, tolerance] : {std::tuple{at::kFloat, "fp32", kFp32Tolerance},
                                                std::tuple{at::kBFloat16, "bf16", kBf16Tolerance}}) {
    const auto model = load_qwen2_5_vl_vision(vision_component(name), at::TensorOptions().dtype(dtype));
    std::vector<at::Tensor> pixel_values, alone;
    std::vector<GridThw> grids;
    for (const json& img : cases.at("images")) {
      const std::string stem = img.at("name").get<std::string>();
      const at::Tensor pv = golden[stem + ".pixel_values"];
      const std::vector<GridThw> grid = grids_of(golden[stem + ".image_grid_thw"]);
      const at::Tensor out = model->forward(pv, grid);
      EXPECT_EQ(out.scalar_type(), dtype);
      expect_close(out, golden[stem + "." + dname + ".output"], name + " " + stem + " " + dname, tolerance);
      pixel_values.push_back(pv);
      grids.push_back(grid[0]);
      alone.push_back(out);
    }
    const at::Tensor all = model->forward(at::cat(pixel_values), grids);
    expect_close(all, golden[std::string("all.") + dname + ".output"], name + " all images " + dname, tolerance);
    // An image's tokens attend only to its own (attention per cu_seqlens chunk): its rows of the call with
    // every image are its rows alone, bit for bit.
    EXPECT_TRUE(at::equal(all, at::cat(alone))) << name << " " << dname;
    const at::Tensor frames =
        model->forward(golden["frames.pixel_values"], grids_of(golden["frames.image_grid_thw"]));
    expect_close(frames, golden[std::string("frames.") + dname + ".output"], name + " two frames " + dname, tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Qwen2_5_VLVisionGoldens, ::testing::ValuesIn(vision_fixtures()),
                         dpinfer::test::FixtureParamName());

TEST(Qwen2_5_VLVision, ParametersAreTheCheckpointKeysLessVisual) {
  for (const std::string& name : vision_fixtures()) {
    const auto model = load_qwen2_5_vl_vision(vision_component(name), at::TensorOptions().dtype(at::kFloat));
    std::set<std::string> mine, file;
    for (const auto& p : model->named_parameters()) mine.insert(p.key());
    for (const auto& b : model->named_buffers()) mine.insert(b.key());
    const auto st = io::SafetensorsFile::open(model_fixture_dir(name) + "/model.safetensors");
    for (const io::TensorView& v : st->tensors())
      if (v.name.rfind("visual.", 0) == 0) file.insert(v.name.substr(7));
    EXPECT_EQ(mine, file) << name;
    EXPECT_TRUE(mine.count("patch_embed.proj.weight") && mine.count("merger.mlp.0.weight") &&
                mine.count("merger.mlp.2.bias") && mine.count("blocks.0.attn.qkv.bias") &&
                mine.count("merger.ln_q.weight"));
  }
}

TEST(Qwen2_5_VLVision, WindowIndexPadsPartialWindows) {
  // The first fixture: merged windows of 4 x 4. A 6 x 8 patch grid is 3 x 4 merged tokens: one window of
  // 3 rows (the padding row dropped), then an empty column of windows (4 % 4 == 0 still pads a whole one).
  const Qwen2_5_VLVisionConfig config =
      Qwen2_5_VLVisionConfig::from_json(vision_component("tiny-qwen2.5-vl-vision").config.at("vision_config"));
  ASSERT_EQ(config.merged_window(), 4);
  const Qwen2_5_VisionTransformerImpl shape(config, at::TensorOptions().device(at::kMeta));
  const auto [index, cu] = shape.window_index({{1, 6, 8}});
  EXPECT_EQ(index, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 48}));
  // 10 x 12 patches: 5 x 6 merged, windows 2 x 2 of 4 x 4, 4 x 2, 1 x 4, 1 x 2; a second image follows.
  const auto [index2, cu2] = shape.window_index({{1, 10, 12}, {1, 2, 2}});
  EXPECT_EQ(cu2, (std::vector<int64_t>{0, 64, 96, 112, 120, 124}));
  EXPECT_EQ(index2.size(), 31u);
  EXPECT_EQ(std::vector<int64_t>(index2.begin(), index2.begin() + 5), (std::vector<int64_t>{0, 1, 2, 3, 6}));
  EXPECT_EQ(index2.back(), 30);
}

TEST(Qwen2_5_VLVision, LoadingIsStrict) {
  // A config that asks for more blocks than the file has, or fewer: every visual.* key must be used and every
  // parameter filled.
  for (const auto& [depth, fragment] : {std::pair{5, "missing"}, std::pair{3, "unexpected"}}) {
    Component c = vision_component("tiny-qwen2.5-vl-vision");
    c.config["vision_config"]["depth"] = depth;
    expect_one_line_error([&] { load_qwen2_5_vl_vision(c, at::TensorOptions().dtype(at::kFloat)); }, fragment);
  }
  Component c = vision_component("tiny-qwen2.5-vl-vision");
  c.config["vision_config"]["hidden_size"] = 24;
  c.config["vision_config"]["num_heads"] = 2;
  expect_one_line_error([&] { load_qwen2_5_vl_vision(c, at::TensorOptions().dtype(at::kFloat)); },
                        "of the wrong shape");
  c = vision_component("tiny-qwen2.5-vl-vision");
  c.config.erase("vision_config");
  expect_one_line_error([&] { load_qwen2_5_vl_vision(c, at::TensorOptions().dtype(at::kFloat)); }, "no vision_config");
}

TEST(Qwen2_5_VLVision, ConfigRefusesWhatItDoesNotImplement) {
  const json base = vision_component("tiny-qwen2.5-vl-vision").config.at("vision_config");
  const auto bad = [&](const std::string& key, const json& value, const std::string& fragment) {
    json j = base;
    j[key] = value;
    const std::string what = error_of([&] { Qwen2_5_VLVisionConfig::from_json(j); });
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_NE(what.find(key), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  };
  bad("hidden_act", "relu", "is not supported");
  bad("num_heads", 3, "divisible by num_heads");
  bad("num_heads", 8, "multiple of 4");  // head_dim 2
  bad("window_size", 4, "at least spatial_merge_size * patch_size");
  bad("fullatt_block_indexes", json::array({1, "x"}), "fullatt_block_indexes[1]");
  bad("depth", -1, "depth");
  bad("patch_size", 0, "patch_size");
  // The transformers defaults, and an empty fullatt_block_indexes (every block windowed).
  const Qwen2_5_VLVisionConfig d = Qwen2_5_VLVisionConfig::from_json(json::object());
  EXPECT_EQ(d.depth, 32);
  EXPECT_EQ(d.merged_window(), 4);
  EXPECT_EQ(d.fullatt_block_indexes, (std::vector<int64_t>{7, 15, 23, 31}));
  json none = base;
  none["fullatt_block_indexes"] = json::array();
  EXPECT_TRUE(Qwen2_5_VLVisionConfig::from_json(none).fullatt_block_indexes.empty());
}

TEST(Qwen2_5_VLVision, RealConfigBuildsTheRealShapes) {
  // Qwen2.5-VL 7B's vision_config (Qwen-Image-Edit's text encoder), with the original checkpoint's extra keys
  // ("in_chans", "spatial_patch_size", which transformers keeps as unused attributes). Built on the meta device:
  // transformers' tower has 676550144 parameters (counted with torch.device("meta")).
  const json vc = json::parse(R"({"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
      "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
      "spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
      "tokens_per_second": 2, "temporal_patch_size": 2})");
  const Qwen2_5_VLVisionConfig config = Qwen2_5_VLVisionConfig::from_json(vc);
  EXPECT_EQ(config.head_dim(), 80);
  EXPECT_EQ(config.merged_window(), 4);
  EXPECT_EQ(config.patch_features(), 1176);
  const Qwen2_5_VisionTransformerImpl shape(config, at::TensorOptions().device(at::kMeta));
  int64_t count = 0;
  for (const at::Tensor& p : shape.parameters()) count += p.numel();
  EXPECT_EQ(count, 676550144);
}

TEST(Qwen2_5_VLVision, ForwardRefusesShapesThatDoNotFit) {
  c10::InferenceMode guard;
  const auto model =
      load_qwen2_5_vl_vision(vision_component("tiny-qwen2.5-vl-vision"), at::TensorOptions().dtype(at::kFloat));
  const int64_t features = model->config().patch_features();  // 3 * 2 * 4 * 4
  ASSERT_EQ(features, 96);
  const at::Tensor pv = at::zeros({16, features});
  expect_one_line_error([&] { model->forward(pv, {}); }, "no images");
  expect_one_line_error([&] { model->forward(at::zeros({16, 95}), {{1, 4, 4}}); }, "pixel_values must be [N, 96]");
  expect_one_line_error([&] { model->forward(pv, {{1, 4, 2}}); }, "covers 8 patches but pixel_values has 16");
  expect_one_line_error([&] { model->forward(pv, {{1, 16, 1}}); }, "multiples of spatial_merge_size 2");
  EXPECT_THROW(model->forward(pv, {{0, 4, 4}}), InputError);
  const int64_t huge = int64_t{1} << 40;  // a product that would overflow is counted as too many
  expect_one_line_error([&] { model->forward(pv, {{huge, huge, huge}}); }, "covers more patches");
  EXPECT_EQ(model->forward(pv, {{1, 4, 4}}).sizes(), (std::vector<int64_t>{4, 32}));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

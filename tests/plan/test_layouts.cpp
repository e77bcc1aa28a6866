// Where each item's image goes (plan::OutputLayout): flat, GenEval's and T2I-CompBench's
// trees, and the options that do not go together.
#include <gtest/gtest.h>

#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

plan::Item item(int64_t index, int64_t prompt_index, int image, const std::string& prompt) {
  plan::Item it;
  it.index = index;
  it.prompt_index = prompt_index;
  it.image = image;
  it.prompt = prompt;
  return it;
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    plan::parse_generate_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}


TEST(Layouts, EachLayoutNamesTheFileItsReaderLooksFor) {
  const plan::Item it = item(1234567, 12, 3, "a red car");
  EXPECT_EQ(plan::item_file_name(it, {}), "1234567.png");
  EXPECT_EQ(plan::item_file_name(it, {plan::Layout::kFlat, plan::ImageFormat::kWebp, 1000}), "01234/1234567.webp");
  EXPECT_EQ(plan::item_file_name(it, {plan::Layout::kGeneval}), "00012/samples/00003.png");
  EXPECT_EQ(plan::item_file_name(item(7, 0, 0, "a red car"), {plan::Layout::kT2iCompBench}),
            "samples/a red car_000007.png");
  EXPECT_EQ(plan::item_file_name(item(7, 0, 0, "x"), {plan::Layout::kT2iCompBench, plan::ImageFormat::kJpeg}),
            "samples/x_000007.jpg");
  // DPG-Bench: the line's id (a prompts folder's file stem), else its place.
  plan::Item with_id = item(9, 2, 1, "x");
  with_id.id = "partiprompts_57";
  EXPECT_EQ(plan::item_file_name(with_id, {plan::Layout::kDpgBench}), "samples/partiprompts_57_1.png");
  EXPECT_EQ(plan::item_file_name(item(9, 2, 3, "x"), {plan::Layout::kDpgBench}), "samples/00002_3.png");
  EXPECT_EQ(plan::file_name_problem("a/b"), "it holds a '/'");
  EXPECT_EQ(plan::file_name_problem("ok"), "");
}

TEST(Layouts, APromptThatCannotNameAT2iCompBenchFileIsSaidWhy) {
  EXPECT_EQ(plan::t2i_compbench_name_problem("a green bench and a red car"), "");
  EXPECT_NE(plan::t2i_compbench_name_problem("a_b").find("holds a '_'"), std::string::npos);
  EXPECT_NE(plan::t2i_compbench_name_problem("a/b").find("holds a '/'"), std::string::npos);
  EXPECT_NE(plan::t2i_compbench_name_problem("").find("empty"), std::string::npos);
  EXPECT_NE(plan::t2i_compbench_name_problem(std::string(240, 'x')).find("too long"), std::string::npos);
}

TEST(Layouts, OptionsThatDoNotGoTogetherAreRefused) {
  EXPECT_EQ(usage_error({"p.txt", "--layout", "drawbench"}),
            "--layout: expected flat, geneval, t2i-compbench, dpg or webdataset, got 'drawbench'");
  EXPECT_EQ(usage_error({"p.txt", "--layout", "dpg", "--image-format", "webp"}),
            "--image-format webp: --layout dpg composes its grids from PNGs; drop --image-format with --layout dpg");
  EXPECT_EQ(usage_error({"p.txt", "--layout", "geneval", "--files-per-dir", "10"}),
            "--files-per-dir: the geneval layout names its own directories; drop --files-per-dir");
  EXPECT_EQ(usage_error({"p.txt", "--layout", "geneval", "--image-format", "jpg"}),
            "--image-format jpeg: GenEval's evaluate_images.py reads only <n>.png files; drop --image-format with "
            "--layout geneval");
  EXPECT_EQ(usage_error({"p.txt", "--layout", "t2i-compbench", "--image-format", "webp"}), "(no error)");
  EXPECT_EQ(usage_error({"p.txt", "--layout", "webdataset", "--overwrite"}),
            "--overwrite: a WebDataset shard is not rewritten in place, and a remade item would then be in two shards; "
            "give another --out");
  EXPECT_EQ(usage_error({"p.txt", "--layout", "webdataset", "--shard-size", "0"}),
            "--shard-size: expected 1..1000000 items per shard, got 0");
  // GenEval's metadata lines carry fields dpinfer does not know: its layout keeps them.
  EXPECT_TRUE(plan::prompt_file_options(plan::parse_generate_args({"p.jsonl", "--layout", "geneval"})).keep_fields);
  EXPECT_FALSE(plan::prompt_file_options(plan::parse_generate_args({"p.jsonl"})).keep_fields);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

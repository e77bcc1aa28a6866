// Parquet prompts (io/prompt_file.h, read_prompt_parquet and read_prompt_parquet_folder) and the
// parquet module itself (io/parquet.h): the CSV columns with parquet's types, --prompt-column and
// --keep-fields, a datasets folder, and one line naming file, row and column for each kind of bad
// input. The files are written with io::encode_parquet here; parquet_prompts_read_as_python_writes_them
// reads files that pyarrow, pandas and datasets wrote.
#include <gtest/gtest.h>

#include <filesystem>

#include "dpinfer/io/parquet.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/io/shard_index.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using test::read_file;
using test::write_file;
using Type = io::ParquetColumn::Type;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

io::ParquetColumn strings(const std::string& name, std::vector<std::string> v, std::vector<uint8_t> valid = {}) {
  io::ParquetColumn c;
  c.name = name;
  c.type = Type::kString;
  c.valid = valid.empty() ? std::vector<uint8_t>(v.size(), 1) : valid;
  c.strings = std::move(v);
  return c;
}

io::ParquetColumn ints(const std::string& name, std::vector<int64_t> v, std::vector<uint8_t> valid = {}) {
  io::ParquetColumn c;
  c.name = name;
  c.type = Type::kInt64;
  c.valid = valid.empty() ? std::vector<uint8_t>(v.size(), 1) : valid;
  c.ints = std::move(v);
  return c;
}

io::ParquetColumn doubles(const std::string& name, std::vector<double> v) {
  io::ParquetColumn c;
  c.name = name;
  c.type = Type::kDouble;
  c.valid = std::vector<uint8_t>(v.size(), 1);
  c.doubles = std::move(v);
  return c;
}

void write_parquet(const std::string& path, std::vector<io::ParquetColumn> columns) {
  io::ParquetTable t;
  t.rows = columns.empty() ? 0 : static_cast<int64_t>(columns.front().valid.size());
  t.columns = std::move(columns);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_file(path, io::encode_parquet(t));
}

std::string error_of(const std::string& path, io::PromptFileOptions o = {}) {
  try {
    io::read_prompt_file(path, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

class PromptParquet : public ::testing::Test {
 protected:
  void SetUp() override {
#if !DPINFER_TEST_PARQUET
    GTEST_SKIP() << "built without parquet (no pyarrow when CMake configured: cmake/Arrow.cmake)";
#endif
    std::string why;
    if (!io::parquet_support(&why)) GTEST_FAIL() << why;
  }
  test::TempDir dir;
};


TEST_F(PromptParquet, ReadsTheKnownColumnsWithTheirTypes) {
  const std::string p = dir.file("p.parquet");
  write_parquet(p, {strings("prompt", {"a red fox", "caf\xC3\xA9", ""}), ints("seed", {5, 0, 7}, {1, 0, 1}),
                    doubles("steps", {20, std::nan(""), 4}), doubles("guidance_scale", {7.5, 3, 1}),
                    strings("negative_prompt", {"blurry", "", ""}, {1, 0, 1}), ints("id", {10, 11, 12})});
  const auto specs = io::read_prompt_file(p, io::PromptFileOptions{});
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].prompt, "a red fox");
  EXPECT_EQ(specs[0].line, 1);
  EXPECT_EQ(specs[2].line, 3);
  EXPECT_EQ(specs[0].seed, 5);
  EXPECT_FALSE(specs[1].seed) << "a null is unset";
  EXPECT_EQ(specs[0].steps, 20) << "a float of integral value, as pandas stores integers with gaps";
  EXPECT_FALSE(specs[1].steps) << "NaN is pandas' missing value";
  EXPECT_EQ(specs[0].guidance_scale, 7.5);
  EXPECT_EQ(specs[0].negative_prompt, "blurry");
  EXPECT_FALSE(specs[1].negative_prompt);
  EXPECT_EQ(specs[2].negative_prompt, "");
  EXPECT_EQ(specs[1].id, "11");
  EXPECT_EQ(specs[2].prompt, "");
}

TEST_F(PromptParquet, PromptColumnAndKeptFields) {
  const std::string p = dir.file("c.parquet");
  io::ParquetColumn flag;
  flag.name = "nsfw";
  flag.type = Type::kBool;
  flag.valid = {1, 1};
  flag.ints = {0, 1};
  write_parquet(p, {strings("caption", {"a", "b"}), strings("url", {"http://x/1", "http://x/2"}),
                    doubles("similarity", {0.25, 0.5}), flag, ints("__index_level_0__", {4, 9})});
  io::PromptFileOptions o;
  o.prompt_column = "caption";
  EXPECT_NE(error_of(p, o).find("unknown column 'url'; the prompt is in column 'caption'"), std::string::npos) << error_of(p, o);
  o.keep_fields = true;
  const auto specs = io::read_prompt_file(p, o);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].prompt, "b");
  EXPECT_EQ(specs[1].fields["url"], "http://x/2");
  EXPECT_EQ(specs[1].fields["similarity"], 0.5);
  EXPECT_EQ(specs[1].fields["nsfw"], true);
  EXPECT_FALSE(specs[1].fields.contains("__index_level_0__")) << "pandas' index is no field";
  o.reserved_field = [](const std::string& k) { return k == "url"; };
  EXPECT_NE(error_of(p, o).find("column 'url' is one that dpinfer writes"), std::string::npos) << error_of(p, o);
}

TEST_F(PromptParquet, BadInputIsOneLineNamingFileRowAndColumn) {
  const std::string p = dir.file("bad.parquet");
  write_parquet(p, {strings("prompt", {"a", "b"}), doubles("seed", {1, 1.5})});
  EXPECT_EQ(error_of(p), "'" + p + "' row 1, column 'seed': must be an integer, got 1.500000");
  write_parquet(p, {strings("prompt", {"a", "b"}), ints("steps", {1, 0})});
  EXPECT_EQ(error_of(p), "'" + p + "' row 1, column 'steps': must be in 1..10000, got 0");
  write_parquet(p, {strings("prompt", {"a", "b"}, {1, 0})});
  EXPECT_NE(error_of(p).find("row 1, column 'prompt': is null"), std::string::npos) << error_of(p);
  write_parquet(p, {ints("prompt", {1, 2})});
  EXPECT_NE(error_of(p).find("row 0, column 'prompt': must hold strings, but it is a column of int64"),
            std::string::npos)
      << error_of(p);
  write_parquet(p, {strings("text", {"a"})});
  EXPECT_NE(error_of(p).find("no column 'prompt' for the prompt (it has 'text'); name the prompt's column with "
                             "--prompt-column"),
            std::string::npos)
      << error_of(p);
  write_file(p, "PAR1 this is not parquet at all");
  EXPECT_NE(error_of(p).find("'" + p + "': not a parquet file"), std::string::npos) << error_of(p);
  // Cut short: the footer is gone.
  write_parquet(p, {strings("prompt", {"a", "b"})});
  const std::string whole = read_file(p);
  write_file(p, whole.substr(0, whole.size() / 2));
  EXPECT_NE(error_of(p).find("'" + p + "': not a parquet file, or a damaged one"), std::string::npos) << error_of(p);
  EXPECT_NE(error_of(dir.file("missing.parquet")).find("missing.parquet"), std::string::npos);
}

TEST_F(PromptParquet, ADatasetsFolderIsOneTableUnlessItHoldsSeveralSplits) {
  const std::string d = dir.file("ds");
  write_parquet(d + "/data/train-00001-of-00002.parquet", {strings("prompt", {"c", "d"})});
  write_parquet(d + "/data/train-00000-of-00002.parquet", {strings("prompt", {"a", "b"})});
  write_parquet(d + "/.cache/x.parquet", {strings("other", {"z"})});
  write_file(d + "/README.md", "---\nlicense: mit\n---\n");
  const auto specs = io::read_prompt_file(d, io::PromptFileOptions{});
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].prompt, "a");
  EXPECT_EQ(specs[3].prompt, "d");
  EXPECT_EQ(specs[3].line, 4) << "lines go on from file to file";
  write_parquet(d + "/data/test-00000-of-00001.parquet", {strings("prompt", {"t"})});
  const std::string e = error_of(d);
  EXPECT_NE(e.find("holds several splits: 'test' ('data/test-00000-of-00001.parquet'), 'train'"), std::string::npos)
      << e;
  EXPECT_EQ(io::read_prompt_file(d + "/data/test-00000-of-00001.parquet", io::PromptFileOptions{}).size(), 1u);
}

TEST_F(PromptParquet, IndexTableTypesEachFieldByItsValues) {
  const std::vector<nlohmann::json> records = {
      {{"key", "000000000"}, {"prompt", "a"}, {"status", "ok"}, {"width", 8}, {"height", 8}, {"seed", 1},
       {"guidance_scale", 7}, {"settings", {"clip_skip"}}, {"tag", "x"}},
      {{"key", "000000001"}, {"prompt", "b"}, {"status", "ok"}, {"width", 8}, {"height", 16}, {"seed", 2},
       {"guidance_scale", 7.5}, {"settings", {"clip_skip"}}, {"tag", 3}}};
  const std::string p = dir.file("index.parquet");
  write_file(p, io::encode_index(records));
  const io::ParquetTable t = io::read_parquet(p);
  ASSERT_EQ(t.rows, 2);
  std::vector<std::string> names;
  for (const auto& c : t.columns) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"key", "caption", "status", "error_message", "width", "height",
                                             "guidance_scale", "seed", "settings", "tag"}));
  EXPECT_EQ(t.columns[1].strings[1], "b");
  EXPECT_EQ(t.columns[2].strings[0], "success");
  EXPECT_EQ(t.columns[3].valid[0], 0);
  EXPECT_EQ(t.columns[5].ints[1], 16);
  EXPECT_EQ(t.columns[6].arrow_type, "double");
  EXPECT_EQ(t.columns[7].arrow_type, "int64");
  EXPECT_EQ(t.columns[8].strings[0], "[\"clip_skip\"]");
  EXPECT_EQ(t.columns[9].strings[1], "3") << "mixed types: JSON text";
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

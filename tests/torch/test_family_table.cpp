// The generated model table (issue 31): `dpinfer inspect --families` says what the family rows,
// the LoRA key rules and the single-file kinds say, and every family has its documentation page.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/family_table.h"
#include "dpinfer/pipeline/loading/lora_keys.h"
#include "dpinfer/pipeline/single_file/single_file.h"
#include "support/subprocess.h"

namespace dpinfer::pipeline {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kRepo = DPINFER_TEST_DATA_DIR "/../..";

TEST(FamilyTable, EachRowIsItsFamilysRow) {
  const nlohmann::json rows = families_json();
  ASSERT_EQ(rows.size(), families().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Family& f = families()[i];
    const nlohmann::json& row = rows[i];
    EXPECT_EQ(row["family"], f.name);
    EXPECT_EQ(row["pipeline_classes"], nlohmann::json(f.pipeline_classes));
    EXPECT_EQ(row["default_steps"], f.default_steps);
    EXPECT_EQ(row["default_guidance_scale"], f.default_guidance_scale);
    EXPECT_EQ(row["size_multiple"], f.size_multiple);
    // A family that inpaints takes images too (issue 29).
    if (f.default_inpaint_strength > 0) {
      EXPECT_GT(f.default_strength, 0) << f.name;
    }
    EXPECT_EQ(row["image_strength"].is_null(), f.default_strength <= 0) << f.name;
    EXPECT_EQ(row["mask_strength"].is_null(), f.default_inpaint_strength <= 0) << f.name;
    ASSERT_EQ(row["settings"].size(), f.settings.size()) << f.name;
    for (const SettingSpec& s : f.settings) EXPECT_EQ(row["settings"][s.name], s.default_value) << s.name;
    EXPECT_EQ(row["lora_components"], nlohmann::json(lora_key_rules(f.name).components)) << f.name;
    // Every family with LoRAs reads diffusers' names; one without (FLUX.2 [klein], for now) lists no format.
    if (row["lora_components"].empty())
      EXPECT_TRUE(row["lora_formats"].empty()) << f.name;
    else
      EXPECT_EQ(row["lora_formats"][0], "diffusers / PEFT") << "every family reads diffusers' names";
  }
}

// Every kind of single file dpinfer reads runs on exactly one family, whose row names it.
TEST(FamilyTable, EverySingleFileKindIsInExactlyOneRow) {
  const nlohmann::json rows = families_json();
  for (const std::string& kind : single_file_kinds()) {
    int rows_with_it = 0;
    for (const nlohmann::json& row : rows)
      for (const nlohmann::json& k : row["single_file_kinds"]) rows_with_it += k["kind"] == kind;
    EXPECT_EQ(rows_with_it, 1) << kind;
  }
  EXPECT_EQ(rows[0]["single_file_kinds"][0]["kind"], "sd1");
  EXPECT_EQ(rows[0]["single_file_kinds"][0]["shipped_base"], true);
}

// The README's table links each family to docs/models/<name>.md: a new family row needs its page.
TEST(FamilyTable, EveryFamilyHasItsPage) {
  const std::string table = families_markdown();
  for (const Family& f : families()) {
    const std::string page = "docs/models/" + f.name + ".md";
    EXPECT_NE(table.find("](" + page + ")"), std::string::npos) << f.name;
    EXPECT_TRUE(std::filesystem::is_regular_file(kRepo + "/" + page)) << page << " is missing: write the family's page";
  }
}

TEST(FamilyTable, InspectFamiliesPrintsTheTable) {
  const test::RunResult md = test::run({test::dpinfer_binary(), "inspect", "--families"});
  EXPECT_EQ(md.exit_code, 0) << md.err;
  EXPECT_EQ(md.out, families_markdown());
  const test::RunResult js = test::run({test::dpinfer_binary(), "inspect", "--families", "--json"});
  EXPECT_EQ(js.exit_code, 0) << js.err;
  EXPECT_EQ(nlohmann::json::parse(js.out), families_json());
  const test::RunResult both = test::run({test::dpinfer_binary(), "inspect", "--families", "some/model"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--families takes no MODEL"), std::string::npos) << both.err;
  const test::RunResult none = test::run({test::dpinfer_binary(), "inspect"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("MODEL is required"), std::string::npos) << none.err;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::pipeline

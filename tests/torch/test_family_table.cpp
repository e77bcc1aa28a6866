// The family rows (issue 29: the only registry) have every part a family needs, and the generated model table
// (issue 31): `dpinfer inspect --families` says what the family rows, the LoRA key rules and the single-file kinds
// say, and every family has its documentation page.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
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
    // A class whose images are references to edit (its row's reference_facts) is listed with them; a family whose
    // every class takes references has no img2img strength. Several references per item, or a required one, are
    // references first.
    bool every_class_references = true;
    for (const std::string& c : f.pipeline_classes) {
      const ReferenceFacts refs = class_reference_facts(c);
      EXPECT_EQ(row["references"].contains(c), refs.references) << c;
      every_class_references = every_class_references && refs.references;
      if (!refs.references) {
        EXPECT_FALSE(refs.several || refs.required || refs.sets_item_size || refs.prompt_reads) << c;
        EXPECT_EQ(refs.max_pixels, 0) << c;
      } else {
        EXPECT_EQ(row["references"][c]["several"], refs.several) << c;
        EXPECT_EQ(row["references"][c]["required"], refs.required) << c;
      }
    }
    if (every_class_references) {
      EXPECT_EQ(f.default_strength, 0) << f.name;
      EXPECT_EQ(f.default_inpaint_strength, 0) << f.name;
    }
    ASSERT_EQ(row["settings"].size(), f.settings.size()) << f.name;
    for (const SettingSpec& s : f.settings) EXPECT_EQ(row["settings"][s.name], s.default_value) << s.name;
    EXPECT_EQ(row["lora_components"], nlohmann::json(f.lora_rules().components)) << f.name;
    // Every family with LoRAs reads diffusers' names; one without would list no format.
    if (row["lora_components"].empty())
      EXPECT_TRUE(row["lora_formats"].empty()) << f.name;
    else
      EXPECT_EQ(row["lora_formats"][0], "diffusers / PEFT") << "every family reads diffusers' names";
  }
}

// The torch side's rows are the torch-free spec rows (family_spec.h), in their order, each with its functions: the
// join throws for a spec without functions or functions without a spec, and copies every fact.
TEST(FamilyTable, EachFamilyIsItsSpecRowWithItsFunctions) {
  ASSERT_EQ(families().size(), family_specs().size());
  for (size_t i = 0; i < families().size(); ++i) {
    const Family& f = families()[i];
    const FamilySpec& spec = family_specs()[i];
    EXPECT_EQ(f.name, spec.name);
    EXPECT_EQ(f.pipeline_classes, spec.pipeline_classes);
    EXPECT_EQ(f.settings.size(), spec.settings.size());
    EXPECT_EQ(f.default_strength, spec.default_strength);
    EXPECT_EQ(f.lora_rules, spec.lora_rules);
    for (const std::string& c : spec.pipeline_classes) {
      EXPECT_EQ(find_family_spec(c), &spec) << c;
      EXPECT_EQ(find_family(c), &f) << c;
    }
  }
  EXPECT_EQ(find_family_spec("NoSuchPipeline"), nullptr);
}

// The rows are the only registry (issue 29), so a row that lacks a part fails here, as llama.cpp's
// test-llama-archs fails for an architecture that lacks one: its load and default size, its LoRA rules (which
// name only its own components, and its denoiser whenever they name any), one denoiser, a VAE, a scheduler,
// text encoders with tokenizers, settings that explain themselves and whose defaults lie within their bounds, a
// tiny test pipeline of its class with diffusers' goldens, and the shipped configs of each single-file kind that
// says it ships them (and none for a kind that does not).
TEST(FamilyTable, EveryRowHasEveryPart) {
  std::set<std::string> names, classes;
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(names.insert(f.name).second) << "two rows named " << f.name;
    EXPECT_FALSE(f.label.empty());
    ASSERT_FALSE(f.pipeline_classes.empty());
    for (const std::string& c : f.pipeline_classes) EXPECT_TRUE(classes.insert(c).second) << c << " in two rows";
    EXPECT_NE(f.load, nullptr);
    EXPECT_NE(f.default_size, nullptr);
    ASSERT_NE(f.lora_rules, nullptr) << "name the family's LoRA rules (loading/lora_keys.h)";
    EXPECT_GE(f.default_steps, 1);
    EXPECT_GE(f.default_guidance_scale, 0.0);
    EXPECT_GE(f.size_multiple, 1);

    std::map<ComponentRole, int> roles;
    std::set<std::string> components;
    std::string denoiser;
    for (const ComponentSpec& c : f.components) {
      EXPECT_TRUE(components.insert(c.name).second) << "component " << c.name << " twice";
      ++roles[c.role];
      if (c.role == ComponentRole::kDenoiser) denoiser = c.name;
      if (c.role != ComponentRole::kScheduler) {
        EXPECT_FALSE(c.classes.empty()) << c.name << " accepts no class";
      }
    }
    EXPECT_EQ(roles[ComponentRole::kDenoiser], 1);
    EXPECT_EQ(roles[ComponentRole::kVae], 1);
    EXPECT_EQ(roles[ComponentRole::kScheduler], 1);
    EXPECT_GE(roles[ComponentRole::kTextEncoder], 1);
    EXPECT_GE(roles[ComponentRole::kTokenizer], 1);

    const LoraKeyRules rules = f.lora_rules();
    for (const std::string& c : rules.components) EXPECT_EQ(components.count(c), 1u) << "LoRA component " << c;
    if (!rules.components.empty()) {
      EXPECT_EQ(std::count(rules.components.begin(), rules.components.end(), denoiser), 1) << "LoRAs skip " << denoiser;
    }

    std::set<std::string> settings;
    for (const SettingSpec& s : f.settings) {
      EXPECT_TRUE(settings.insert(s.name).second) << "setting " << s.name << " twice";
      EXPECT_FALSE(s.help.empty()) << s.name;
      if (s.type == SettingSpec::Type::kNumber || s.type == SettingSpec::Type::kInteger) {
        EXPECT_GE(s.default_value.get<double>(), s.min) << s.name;
        EXPECT_LE(s.default_value.get<double>(), s.max) << s.name;
      }
    }

    // A tiny pipeline of one of its classes, with diffusers' goldens beside it.
    bool fixture = false;
    for (const auto& entry : std::filesystem::directory_iterator(kRepo + "/tests/data/pipelines")) {
      const std::filesystem::path index = entry.path() / "model_index.json";
      if (!std::filesystem::is_regular_file(index)) continue;
      std::ifstream in(index);
      const std::string cls = nlohmann::json::parse(in).value("_class_name", "");
      if (std::find(f.pipeline_classes.begin(), f.pipeline_classes.end(), cls) == f.pipeline_classes.end()) continue;
      fixture = fixture || std::filesystem::is_directory(entry.path().string() + ".golden");
    }
    EXPECT_TRUE(fixture) << "no tests/data/pipelines/<name> of its classes with a <name>.golden beside it";

    for (const std::string& kind : single_file_kinds()) {
      const std::string cls = single_file_pipeline_class(kind);
      if (std::find(f.pipeline_classes.begin(), f.pipeline_classes.end(), cls) == f.pipeline_classes.end()) continue;
      EXPECT_EQ(std::filesystem::is_regular_file(kRepo + "/configs/single_file/" + kind + "/model_index.json"),
                single_file_kind_has_shipped_base(kind))
          << "configs/single_file/" << kind;
    }
  }
  // Every single-file kind runs on some row's class.
  for (const std::string& kind : single_file_kinds())
    EXPECT_EQ(classes.count(single_file_pipeline_class(kind)), 1u) << kind;
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

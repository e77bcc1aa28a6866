// plan::parse_generate_args against hostile --config files and unbounded numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "dpinfer/pipeline/families/family_spec.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string usage_error(const std::vector<std::string>& args) {
  try {
    plan::parse_generate_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string config_error(const TempDir& dir, const std::string& content) {
  write_file(dir.file("c.json"), content);
  return usage_error({"p.txt", "--config", dir.file("c.json")});
}


// Issue 11, item 1: a --config value nested 100,000 deep made the message's dump() crash.
TEST(GenerateOptionsHardening, DeepConfigIsOneLineNotACrash) {
  TempDir dir;
  const int n = 100000;
  EXPECT_EQ(config_error(dir, "{\"steps\":" + std::string(n, '[') + std::string(n, ']') + "}"),
            "--config '" + dir.file("c.json") +
                "': not JSON (nested deeper than 64 levels); expected one object such as {\"steps\": 30}");
  const std::string nested = std::string(40, '[') + std::string(40, ']');
  EXPECT_EQ(config_error(dir, "{\"steps\":" + nested + "}"),
            "--config '" + dir.file("c.json") + "': 'steps' must be an integer, got [[[[[[[[[...]]]]]]]]]");
}

// Issue 11, items 1, 2 and 5 on --config: 1e999, huge and hostile keys and values.
TEST(GenerateOptionsHardening, ConfigMessagesAreBoundedAndEscaped) {
  TempDir dir;
  EXPECT_EQ(config_error(dir, "{\"guidance_scale\": 1e999}"),
            "--config '" + dir.file("c.json") +
                "': not JSON (number overflow parsing '1e999'); expected one object such as {\"steps\": 30}");
  const std::string key = config_error(dir, "{\"\\u001b]0;x\\u0007" + std::string(100000, 'k') + "\": 1}");
  EXPECT_EQ(key.find('\x1b'), std::string::npos);
  EXPECT_LT(key.size(), 300u) << key;
  EXPECT_NE(key.find("unknown key '\\x1B]0;x\\x07kkk"), std::string::npos) << key;
  const std::string value = config_error(dir, "{\"overwrite\": \"" + std::string(1'000'000, 'v') + "\"}");
  EXPECT_LT(value.size(), 300u);
  EXPECT_EQ(config_error(dir, "{\"steps\": 3, \"steps\": 4}"),
            "--config '" + dir.file("c.json") + "': key 'steps' appears twice; keep one");
  // CLI11's own message quotes the value it could not take.
  const std::string cli = usage_error({"p.txt", "--batch-size", "x\x1b[2J" + std::string(100000, 'y')});
  EXPECT_EQ(cli.find('\x1b'), std::string::npos);
  EXPECT_LT(cli.size(), 400u);
  EXPECT_LT(usage_error({"p.txt", "--dtype", std::string(100000, 'z')}).size(), 200u);
  // Found by tests/fuzz/fuzz_generate_config: the words nobody asked for, quoted raw.
  const std::string extra = usage_error({"p.txt", "a\x1b[2J\x02", std::string(100000, 'w')});
  EXPECT_EQ(extra.rfind("the following arguments were not expected: a\\x1B[2J\\x02 www", 0), 0u) << extra;
  EXPECT_LT(extra.size(), 400u);
}

// Issue 11, item 10: --config through a link to itself is a loop, not "cannot read".
TEST(GenerateOptionsHardening, ASelfLoopingConfigLinkIsNamedAsOne) {
  TempDir dir;
  ASSERT_EQ(::symlink("c.json", dir.file("c.json").c_str()), 0);
  EXPECT_EQ(usage_error({"p.txt", "--config", dir.file("c.json")}),
            "--config: cannot read '" + dir.file("c.json") + "': a loop of symbolic links");
}

// Issue 11, item 4a: the command line has the JSONL bounds (1..10000 steps, 8..16384 pixels).
TEST(GenerateOptionsHardening, StepsAndSizesHaveTheJsonlBounds) {
  EXPECT_EQ(usage_error({"p.txt", "--steps", "2000000000"}), "--steps: expected 1..10000, got 2000000000");
  EXPECT_EQ(usage_error({"p.txt", "--steps", "0"}), "--steps: expected 1..10000, got 0");
  EXPECT_EQ(usage_error({"p.txt", "--width", "16392"}), "--width: expected a multiple of 8 in 8..16384, got 16392");
  EXPECT_EQ(usage_error({"p.txt", "--height", "2147483640"}),
            "--height: expected a multiple of 8 in 8..16384, got 2147483640");
  EXPECT_EQ(usage_error({"p.txt", "--width", "12"}), "--width: expected a multiple of 8 in 8..16384, got 12");
  EXPECT_EQ(usage_error({"p.txt", "--steps", "10000", "--width", "16384", "--height", "8"}), "");
  TempDir dir;
  EXPECT_EQ(config_error(dir, "{\"steps\": 10001}"), "--steps: expected 1..10000, got 10001");
}

// Issue 11, item 20.
TEST(GenerateOptionsHardening, SeedFromIsIndexOrPrompt) {
  EXPECT_EQ(plan::parse_generate_args({"p.txt"}).seed_from, "index");
  plan::GenerateOptions o = plan::parse_generate_args({"p.txt", "--seed-from", "prompt"});
  EXPECT_EQ(o.seed_from, "prompt");
  EXPECT_EQ(o.to_json()["seed_from"], "prompt");
  EXPECT_EQ(usage_error({"p.txt", "--seed-from", "line"}), "--seed-from: expected index or prompt, got 'line'");
  TempDir dir;
  write_file(dir.file("c.json"), "{\"seed_from\": \"prompt\"}");
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--config", dir.file("c.json")}).seed_from, "prompt");
}

// --write-queue: images that wait for the writer thread; 0 is the serial loop.
TEST(GenerateOptionsHardening, WriteQueueIsZeroToItsBound) {
  EXPECT_EQ(plan::parse_generate_args({"p.txt"}).write_queue, 16);
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--write-queue", "0"}).write_queue, 0);
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--write-queue", "1024"}).to_json()["write_queue"], 1024);
  EXPECT_EQ(usage_error({"p.txt", "--write-queue", "1025"}),
            "--write-queue: expected 0 (write in the denoising thread) to 1024 images, got 1025");
  TempDir dir;
  EXPECT_EQ(config_error(dir, "{\"write_queue\": 2.5}"), "--config '" + dir.file("c.json") + "': 'write_queue' must be an integer, got 2.5");
}

// --files-per-dir: 0 (flat, the default) or 1..10^9 images per numbered subdirectory.
TEST(GenerateOptionsHardening, FilesPerDirIsZeroOrOneToItsBound) {
  EXPECT_EQ(plan::parse_generate_args({"p.txt"}).files_per_dir, 0);
  EXPECT_EQ(plan::parse_generate_args({"p.txt"}).to_json()["files_per_dir"], 0);
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--files-per-dir", "1"}).files_per_dir, 1);
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--files-per-dir", "1000000000"}).to_json()["files_per_dir"],
            1000000000);
  for (const char* bad : {"-1", "1000000001"})
    EXPECT_EQ(usage_error({"p.txt", "--files-per-dir", bad}),
              std::string("--files-per-dir: expected 0 (all images in --out) or 1..1000000000, got ") + bad);
  TempDir dir;
  write_file(dir.file("c.json"), "{\"files_per_dir\": 10000}");
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--config", dir.file("c.json")}).files_per_dir, 10000);
  EXPECT_EQ(plan::parse_generate_args({"p.txt", "--config", dir.file("c.json"), "--files-per-dir", "0"}).files_per_dir,
            0);
  EXPECT_EQ(config_error(dir, "{\"files_per_dir\": \"many\"}"),
            "--config '" + dir.file("c.json") + "': 'files_per_dir' must be an integer, got \"many\"");
}

TEST(GenerateOptionsLora, RepeatableWithScalesAndTheCommandLineReplacesTheConfig) {
  plan::GenerateOptions o = plan::parse_generate_args({"p.txt", "--lora", "a.safetensors:0.5", "--lora", "b.safetensors"});
  ASSERT_EQ(o.loras.size(), 2u);
  EXPECT_EQ(o.loras[0], (io::LoraRef{"a.safetensors", 0.5}));
  EXPECT_EQ(o.loras[1], (io::LoraRef{"b.safetensors", 1.0}));
  EXPECT_EQ(o.to_json()["loras"][0]["scale"], 0.5);

  TempDir dir;
  write_file(dir.file("c.json"), R"({"loras": [{"path": "c.safetensors", "scale": -0.25}, "d.safetensors:2"]})");
  o = plan::parse_generate_args({"p.txt", "--config", dir.file("c.json")});
  ASSERT_EQ(o.loras.size(), 2u);
  EXPECT_EQ(o.loras[0], (io::LoraRef{"c.safetensors", -0.25}));
  EXPECT_EQ(o.loras[1], (io::LoraRef{"d.safetensors", 2.0}));
  o = plan::parse_generate_args({"p.txt", "--config", dir.file("c.json"), "--lora", "e.safetensors:0.1"});
  ASSERT_EQ(o.loras.size(), 1u);
  EXPECT_EQ(o.loras[0], (io::LoraRef{"e.safetensors", 0.1}));

  write_file(dir.file("bad.json"), R"({"loras": [{"path": "c.safetensors", "strength": 1}]})");
  EXPECT_THROW(plan::parse_generate_args({"p.txt", "--config", dir.file("bad.json")}), UsageError);
}

// --config's words go before the command line: a repeatable option among them must take one
// value each, not the PROMPTS positional after them too.
TEST(GenerateOptionsLora, ConfigSettingsAndLorasLeaveThePromptsPathAlone) {
  TempDir dir;
  write_file(dir.file("c.json"), R"({"settings": {"clip_skip": 1}, "loras": ["a.safetensors"]})");
  const plan::GenerateOptions o = plan::parse_generate_args({"p.txt", "--config", dir.file("c.json")});
  EXPECT_EQ(o.prompts, "p.txt");
  EXPECT_EQ(o.settings["clip_skip"], 1);
  ASSERT_EQ(o.loras.size(), 1u);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

namespace {
namespace DPINFER_UNITY_ID {

// Issue 29: the help's defaults and size multiples are the family rows' (pipeline/families/family_spec.h), read by
// this torch-free layer, so a new row or a changed default shows there without an edit to the options.
TEST(GenerateOptionsHelp, DefaultsAndSizeMultiplesAreTheFamilyRows) {
  const std::string md = plan::generate_options_markdown();
  const auto line_of = [&](const std::string& option) {
    const size_t at = md.find("| `" + option);
    EXPECT_NE(at, std::string::npos) << option;
    return md.substr(at, md.find('\n', at) - at);
  };
  const std::string steps = line_of("--steps");
  const std::string guidance = line_of("--guidance-scale");
  const std::string width = line_of("--width");
  const std::string strength = line_of("--strength");
  ASSERT_FALSE(pipeline::family_specs().empty());
  for (const pipeline::FamilySpec& f : pipeline::family_specs()) {
    SCOPED_TRACE(f.name);
    EXPECT_NE(steps.find(f.label), std::string::npos) << steps;
    EXPECT_NE(guidance.find(f.label), std::string::npos) << guidance;
    EXPECT_NE(width.find(f.label), std::string::npos) << width;
    EXPECT_EQ(strength.find(f.label) != std::string::npos, f.default_strength > 0) << strength;
  }
  // Grouped by value in row order: the first row's value leads, with every family that shares it.
  const pipeline::FamilySpec& first = pipeline::family_specs().front();
  EXPECT_NE(steps.find("default: the model family's: " + std::to_string(first.default_steps) + " for " + first.label),
            std::string::npos)
      << steps;
  EXPECT_NE(width.find("multiple of the model family's size multiple (" + std::to_string(first.size_multiple) +
                       " for " + first.label),
            std::string::npos)
      << width;
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

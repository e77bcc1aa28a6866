// --scheduler-set KEY=VALUE end to end with the real pipelines: the images are those of the
// same model with the key written into its scheduler_config.json (the option's whole
// meaning), the records carry the keys and resume compares them, and keys diffusers' class
// would ignore, a name's fixed keys and bad values are refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

using namespace dpinfer::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";
const std::map<std::string, std::string> kEnv = {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}};

RunResult generate(const TempDir& dir, const std::string& model, const std::string& out,
                   const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {DPINFER_WORKER_BINARY, "generate", dir.file("p.txt"), "--model", model,
                                   "--out",               out,        "--steps",         "3"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv, kEnv, 300s);
}

std::vector<uint8_t> pixels(const std::string& out) { return read_png(out + "/000000.png").pixels; }

/// A copy of the tiny pipeline `name` whose scheduler_config.json has `keys` written in.
std::string with_scheduler_keys(const TempDir& dir, const std::string& name, const nlohmann::json& keys) {
  static int copies = 0;
  const std::string copy = dir.file(name + "-edited-" + std::to_string(copies++));
  fs::copy(kPipelines + name, copy, fs::copy_options::recursive);
  const std::string path = copy + "/scheduler/scheduler_config.json";
  nlohmann::json config = nlohmann::json::parse(read_file(path));
  config.update(keys);
  write_file(path, config.dump(2));
  return copy;
}


// SDXL-Lightning's `EulerDiscreteScheduler.from_config(config, timestep_spacing="trailing")`,
// and a key that _use_default_values would otherwise send back to the class default.
TEST(SchedulerSettingsE2E, AKeyActsAsIfTheModelsSchedulerConfigSaidSo) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  const std::string model = kPipelines + "tiny-sdxl";
  ASSERT_EQ(generate(dir, model, dir.file("plain"), {}).exit_code, 0);
  RunResult r = generate(dir, model, dir.file("set"), {"--scheduler-set", "timestep_spacing=trailing"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string edited = with_scheduler_keys(dir, "tiny-sdxl", {{"timestep_spacing", "trailing"}});
  ASSERT_EQ(generate(dir, edited, dir.file("edited"), {}).exit_code, 0);
  EXPECT_EQ(pixels(dir.file("set")), pixels(dir.file("edited")));
  EXPECT_NE(pixels(dir.file("set")), pixels(dir.file("plain")));
  const auto rows = read_jsonl(dir.file("set/metadata.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["scheduler_settings"], nlohmann::json({{"timestep_spacing", "trailing"}}));
  EXPECT_FALSE(read_jsonl(dir.file("plain/metadata.jsonl"))[0].contains("scheduler_settings"));
  EXPECT_EQ(nlohmann::json::parse(read_file(dir.file("set/run.json")))["options"]["scheduler_settings"],
            nlohmann::json({{"timestep_spacing", "trailing"}}));

  // A config that lists the key in _use_default_values (saved at the class default): the
  // key given here still counts.
  const std::string defaulted =
      with_scheduler_keys(dir, "tiny-sdxl", {{"_use_default_values", {"timestep_spacing"}}});
  ASSERT_EQ(generate(dir, defaulted, dir.file("defaulted"), {"--scheduler-set", "timestep_spacing=trailing"}).exit_code, 0);
  EXPECT_EQ(pixels(dir.file("defaulted")), pixels(dir.file("edited")));

  // Resume compares them: the plain run's directory refuses the set keys, and the other way.
  RunResult resume = generate(dir, model, dir.file("plain"), {"--scheduler-set", "timestep_spacing=trailing"});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with scheduler_settings {}")) << resume.err;
  resume = generate(dir, model, dir.file("set"), {});
  EXPECT_EQ(resume.exit_code, 2) << resume.err;
  EXPECT_TRUE(contains(resume.err, "made with scheduler_settings {\"timestep_spacing\":\"trailing\"}")) << resume.err;
  EXPECT_EQ(generate(dir, model, dir.file("set"), {"--scheduler-set", "timestep_spacing=trailing"}).exit_code, 0);
}

// Qwen-Image-Lightning's scheduler config, given whole through --config's "scheduler_settings".
TEST(SchedulerSettingsE2E, AWholeSchedulerConfigFromConfigMatchesTheEditedModel) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  const nlohmann::json lightning = {
      {"base_image_seq_len", 256},    {"base_shift", 1.0986122886681098}, {"invert_sigmas", false},
      {"max_image_seq_len", 8192},    {"max_shift", 1.0986122886681098},  {"num_train_timesteps", 1000},
      {"shift", 1.0},                 {"shift_terminal", nullptr},        {"stochastic_sampling", false},
      {"time_shift_type", "exponential"}, {"use_beta_sigmas", false},     {"use_dynamic_shifting", true},
      {"use_exponential_sigmas", false},  {"use_karras_sigmas", false}};
  write_file(dir.file("c.json"), nlohmann::json({{"scheduler_settings", lightning}}).dump());
  const std::string model = kPipelines + "tiny-qwen-image";
  RunResult r = generate(dir, model, dir.file("set"), {"--config", dir.file("c.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(generate(dir, with_scheduler_keys(dir, "tiny-qwen-image", lightning), dir.file("edited"), {}).exit_code, 0);
  ASSERT_EQ(generate(dir, model, dir.file("plain"), {}).exit_code, 0);
  EXPECT_EQ(pixels(dir.file("set")), pixels(dir.file("edited")));
  EXPECT_NE(pixels(dir.file("set")), pixels(dir.file("plain")));
}

TEST(SchedulerSettingsE2E, KeysTheClassDoesNotTakeFixedKeysAndBadValuesAreRefused) {
  TempDir dir;
  write_file(dir.file("p.txt"), "a red cube\n");
  const std::string model = kPipelines + "tiny-sdxl";
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--scheduler-set", "timestep_spaceing=trailing"},
            "--scheduler-set timestep_spaceing: not a parameter of diffusers' EulerDiscreteScheduler (the euler "
            "scheduler); its parameters: num_train_timesteps, "},
           {{"--scheduler", "flow_match_euler", "--scheduler-set", "shift=3"}, "steps a model that predicts"},
           {{"--scheduler", "dpm++2m", "--scheduler-set", "use_karras_sigmas=true"},
            "--scheduler-set use_karras_sigmas=true: --scheduler dpm++2m sets it to false, as the AUTOMATIC1111 "
            "sampler of that name does; give --scheduler dpm++2m-karras instead"},
           {{"--scheduler-set", "timestep_spacing=sideways"},
            "--scheduler-set: scheduler_config.json (read by the euler scheduler): timestep_spacing 'sideways' is not "
            "supported (supported: linspace, leading, trailing)"},
           {{"--scheduler-set", "_class_name=DDIMScheduler"},
            "--scheduler-set _class_name: keys that start with '_' are not settings; choose the scheduler class with "
            "--scheduler"},
           {{"--scheduler-set", "trailing"},
            "--scheduler-set 'trailing': expected KEY=VALUE, e.g. --scheduler-set timestep_spacing=trailing"}}) {
    RunResult r = generate(dir, model, dir.file("o"), args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("o/000000.png")));
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// Resolving a model: pipeline directories, fake Hugging Face cache trees (refs, snapshots,
// symlinks into blobs), broken model_index.json files, variants, and the tiny fixture
// pipelines under tests/data/pipelines when they are there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dpinfer/io/hub_cache.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/hub/weight_files.h"
#include "dpinfer/pipeline/loading/weights.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "support/temp_dir.h"

namespace dpinfer::test {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

namespace fs = std::filesystem;
using nlohmann::json;
using pipeline::Component;
using pipeline::find_weight_files;
using io::hf_hub_cache_dir;
using pipeline::resolve_model;
using pipeline::WeightFiles;

const char* const kCacheVariables[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME",
                                       "XDG_CACHE_HOME", "HOME"};

/// Sets environment variables for one test and puts every cache variable back after it.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : kCacheVariables) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void unset(const char* name) { ::unsetenv(name); }
  void clear_cache_variables() {
    for (const char* name : kCacheVariables)
      if (std::string(name) != "HOME") ::unsetenv(name);
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

json sd_model_index() {
  return {{"_class_name", "StableDiffusionPipeline"},
          {"_diffusers_version", "0.36.0"},
          {"feature_extractor", {"transformers", "CLIPImageProcessor"}},
          {"safety_checker", {"stable_diffusion", "StableDiffusionSafetyChecker"}},
          {"requires_safety_checker", true},
          {"scheduler", {"diffusers", "PNDMScheduler"}},
          {"text_encoder", {"transformers", "CLIPTextModel"}},
          {"tokenizer", {"transformers", "CLIPTokenizer"}},
          {"unet", {"diffusers", "UNet2DConditionModel"}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

/// A pipeline directory with every file resolve_model() looks at (no weights).
void make_pipeline(const std::string& root, const json& model_index = sd_model_index()) {
  const std::map<std::string, std::string> files{
      {"model_index.json", model_index.dump(2)},
      {"unet/config.json", R"({"_class_name": "UNet2DConditionModel", "sample_size": 8})"},
      {"text_encoder/config.json", R"({"architectures": ["CLIPTextModel"], "hidden_size": 32})"},
      {"tokenizer/tokenizer_config.json", R"({"model_max_length": 77})"},
      {"tokenizer/vocab.json", "{}"},
      {"tokenizer/merges.txt", "#version: 0.2\n"},
      {"vae/config.json", R"({"_class_name": "AutoencoderKL", "scaling_factor": 0.18215})"},
      {"scheduler/scheduler_config.json", R"({"_class_name": "PNDMScheduler"})"},
  };
  for (const auto& [name, content] : files) {
    fs::create_directories(fs::path(root + "/" + name).parent_path());
    write_file(root + "/" + name, content);
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

class ModelDir : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }

  /// A hub cache entry models--<org>--<name> laid out as huggingface_hub leaves it: the
  /// files in blobs/, the snapshot made of relative symlinks to them, refs/<ref> -> commit.
  std::string make_cached(const std::string& cache, const std::string& repo, const std::string& commit,
                          const std::string& ref = "main") {
    const std::string repo_dir =
        cache + "/models--" + repo.substr(0, repo.find('/')) + "--" + repo.substr(repo.find('/') + 1);
    const std::string staging = path("staging-" + commit);
    make_pipeline(staging);
    const std::string snapshot = repo_dir + "/snapshots/" + commit;
    int blob = 0;
    for (const auto& entry : fs::recursive_directory_iterator(staging)) {
      if (!entry.is_regular_file()) continue;
      const fs::path rel = fs::relative(entry.path(), staging);
      const std::string blob_name = "blob" + commit.substr(0, 6) + std::to_string(blob++);
      fs::create_directories(repo_dir + "/blobs");
      fs::copy_file(entry.path(), repo_dir + "/blobs/" + blob_name);
      fs::create_directories((fs::path(snapshot) / rel).parent_path());
      std::string up;
      for (auto it = rel.begin(); it != rel.end(); ++it) up += "../";
      // snapshots/<commit>/<rel> -> ../../[..]/blobs/<name>
      fs::create_symlink(up + "../blobs/" + blob_name, fs::path(snapshot) / rel);
    }
    if (!ref.empty()) {
      fs::create_directories(repo_dir + "/refs");
      write_file(repo_dir + "/refs/" + ref, commit);
    }
    return snapshot;
  }

  TempDir dir_;
  ScopedEnv env_;
};

TEST_F(ModelDir, ResolvesAPipelineDirectory) {
  make_pipeline(path("sd"));
  const auto model = resolve_model(path("sd"));
  EXPECT_EQ(model.root, path("sd"));
  EXPECT_TRUE(model.revision.empty());
  EXPECT_EQ(model.spec, path("sd"));
  EXPECT_EQ(model.model_index["_class_name"], "StableDiffusionPipeline");
  EXPECT_EQ(model.at("unet").path, path("sd/unet"));
  EXPECT_EQ(model.at("unet").library, "diffusers");
  EXPECT_EQ(model.at("unet").class_name, "UNet2DConditionModel");
  EXPECT_EQ(model.at("unet").config["sample_size"], 8);
  EXPECT_EQ(model.at("text_encoder").path, path("sd/text_encoder"));
  EXPECT_EQ(model.at("text_encoder").config["hidden_size"], 32);
  EXPECT_EQ(model.at("tokenizer").class_name, "CLIPTokenizer");
  EXPECT_EQ(model.at("tokenizer").config["model_max_length"], 77);
  EXPECT_EQ(model.at("vae").config["scaling_factor"], 0.18215);
  EXPECT_EQ(model.at("scheduler").name, "scheduler");
  EXPECT_EQ(model.at("scheduler").class_name, "PNDMScheduler");
  EXPECT_EQ(model.at("scheduler").config["_class_name"], "PNDMScheduler");
  EXPECT_TRUE(model.at("unet").variant.empty());
  EXPECT_EQ(model.ignored_components,
            (std::vector<std::string>{"feature_extractor (CLIPImageProcessor)",
                                      "safety_checker (StableDiffusionSafetyChecker)"}));
}

TEST_F(ModelDir, MakesARelativeDirectoryAbsolute) {
  make_pipeline(path("sd"));
  const fs::path before = fs::current_path();
  fs::current_path(dir_.path());
  std::string root;
  std::string message = error_of([&] { root = resolve_model("./sd/").root; });
  fs::current_path(before);
  EXPECT_EQ(message, "");
  EXPECT_EQ(root, path("sd"));
  EXPECT_TRUE(fs::path(root).is_absolute());
}

TEST_F(ModelDir, AcceptsNullOrMissingSafetyCheckerAndFeatureExtractor) {
  json index = sd_model_index();
  index["safety_checker"] = {nullptr, nullptr};
  index["feature_extractor"] = {nullptr, nullptr};
  index["image_encoder"] = {nullptr, nullptr};
  make_pipeline(path("a"), index);
  EXPECT_TRUE(resolve_model(path("a")).ignored_components.empty());
  index.erase("safety_checker");
  index.erase("feature_extractor");
  make_pipeline(path("b"), index);
  EXPECT_NO_THROW(resolve_model(path("b")));
  // A tokenizer_config.json is optional; vocab.json and merges.txt are not.
  fs::remove(path("b/tokenizer/tokenizer_config.json"));
  EXPECT_TRUE(resolve_model(path("b")).at("tokenizer").config.empty());
}

TEST_F(ModelDir, RefusesOtherPipelines) {
  json index = sd_model_index();
  index["_class_name"] = "HunyuanDiTPipeline";
  make_pipeline(path("flux"), index);
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("flux")); }),
                  "'" + path("flux/model_index.json") +
                      "': HunyuanDiTPipeline is not supported yet; supported: StableDiffusionPipeline, StableDiffusionInpaintPipeline, "
                      "StableDiffusionXLPipeline");
  index.erase("_class_name");
  make_pipeline(path("none"), index);
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("none")); }),
                  "model_index.json' has no _class_name");
}

TEST_F(ModelDir, NamesTheMissingComponent) {
  for (const std::string name : {"unet", "text_encoder", "tokenizer", "vae", "scheduler"}) {
    json index = sd_model_index();
    index.erase(name);
    make_pipeline(path("no-" + name), index);
    EXPECT_CONTAINS(error_of([&] { resolve_model(path("no-" + name)); }),
                    "'" + path("no-" + name + "/model_index.json") + "' has no '" + name +
                        "' component; a StableDiffusionPipeline needs unet, text_encoder, tokenizer, "
                        "vae and scheduler");
  }
  json index = sd_model_index();
  index["vae"] = {nullptr, nullptr};
  make_pipeline(path("null-vae"), index);
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("null-vae")); }), "sets 'vae' to null");
  index["vae"] = "AutoencoderKL";
  make_pipeline(path("bad-vae"), index);
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("bad-vae")); }),
                  ": component 'vae' is \"AutoencoderKL\", expected [library, class name]");
  index["vae"] = {"diffusers", "AutoencoderTiny"};
  make_pipeline(path("tiny-vae"), index);
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("tiny-vae")); }),
                  ": component 'vae' is a AutoencoderTiny, which dpinfer does not support; supported: "
                  "AutoencoderKL");
}

TEST_F(ModelDir, NamesTheMissingFolderOrFile) {
  make_pipeline(path("sd"));
  fs::remove(path("sd/scheduler/scheduler_config.json"));
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("sd")); }),
                  "'" + path("sd/scheduler/scheduler_config.json") +
                      "' is missing: component 'scheduler' has no config");
  make_pipeline(path("sd"));
  fs::remove(path("sd/tokenizer/merges.txt"));
  EXPECT_CONTAINS(
      error_of([&] { resolve_model(path("sd")); }),
      "'" + path("sd/tokenizer/merges.txt") + "' is missing: component 'tokenizer' needs it");
  make_pipeline(path("sd"));
  // Not remove_all: libtorch.so exports a GCC 13 copy of it that crashes against Debian's libstdc++.
  fs::remove(path("sd/vae/config.json"));
  fs::remove(path("sd/vae"));
  EXPECT_CONTAINS(
      error_of([&] { resolve_model(path("sd")); }),
      "'" + path("sd/vae") +
          "' is missing: model_index.json lists component 'vae' but its folder is not there");
  make_pipeline(path("sd"));
  write_file(path("sd/unet/config.json"), "{\"sample_size\": ");
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("sd")); }),
                  "'" + path("sd/unet/config.json") + "' is not valid json");
  write_file(path("sd/unet/config.json"), "[]");
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("sd")); }),
                  "'" + path("sd/unet/config.json") + "' is a json array, expected an object");
  make_pipeline(path("sd"));
  write_file(path("sd/model_index.json"), "not json");
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("sd")); }),
                  "'" + path("sd/model_index.json") + "' is not valid json");
}

TEST_F(ModelDir, ExplainsWhatIsNotAPipelineDirectory) {
  fs::create_directories(path("unet"));
  write_file(path("unet/config.json"), "{}");
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("unet")); }),
                  "'" + path("unet") +
                      "' has no model_index.json (it looks like a single component folder); "
                      "pass the diffusers pipeline directory");
  write_file(path("v1-5.ckpt"), "x");
  EXPECT_CONTAINS(
      error_of([&] { resolve_model(path("v1-5.ckpt")); }),
      "is a pickle, which dpinfer never loads (it can run code); convert it once in python with "
      "diffusers: from diffusers import StableDiffusionPipeline; "
      "StableDiffusionPipeline.from_single_file('" +
          path("v1-5.ckpt") + "').save_pretrained('" + path("v1-5") + "', safe_serialization=True)");
  EXPECT_CONTAINS(error_of([&] { resolve_model(path("a/b/c")); }),
                  "model '" + path("a/b/c") + "' is neither a directory ('" + path("a/b/c") +
                      "' does not exist) nor a hugging face hub id (org/name or org/name@revision)");
  EXPECT_CONTAINS(error_of([&] { resolve_model(""); }), "no model given");
}

TEST_F(ModelDir, ResolvesAHubIdFromTheCache) {
  const std::string cache = path("hub");
  env_.set("HF_HUB_CACHE", cache);
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const std::string snapshot = make_cached(cache, "tiny-org/tiny-sd", commit);
  ASSERT_TRUE(fs::is_symlink(snapshot + "/unet/config.json"));
  const auto model = resolve_model("tiny-org/tiny-sd");
  EXPECT_EQ(model.root, snapshot);
  EXPECT_EQ(model.revision, commit);
  EXPECT_EQ(model.at("unet").path, snapshot + "/unet");
  EXPECT_EQ(model.at("unet").config["sample_size"], 8);

  // A branch or tag through refs/, a commit directly.
  const std::string other = "fedcba9876543210fedcba9876543210fedcba98";
  const std::string tagged = make_cached(cache, "tiny-org/tiny-sd", other, "v1.0");
  EXPECT_EQ(resolve_model("tiny-org/tiny-sd@v1.0").root, tagged);
  EXPECT_EQ(resolve_model("tiny-org/tiny-sd@" + other).root, tagged);
  EXPECT_EQ(resolve_model("tiny-org/tiny-sd@main").revision, commit);
}

TEST_F(ModelDir, FindsTheCacheWhereHuggingfaceHubDoes) {
  env_.clear_cache_variables();
  env_.set("HOME", path("home"));
  std::string origin;
  EXPECT_EQ(hf_hub_cache_dir(&origin), path("home") + "/.cache/huggingface/hub");
  EXPECT_EQ(origin, "~/.cache/huggingface/hub");
  env_.set("XDG_CACHE_HOME", path("xdg"));
  EXPECT_EQ(hf_hub_cache_dir(&origin), path("xdg") + "/huggingface/hub");
  EXPECT_EQ(origin, "XDG_CACHE_HOME/huggingface/hub");
  env_.set("HF_HOME", "~/hf");
  EXPECT_EQ(hf_hub_cache_dir(&origin), path("home") + "/hf/hub");
  EXPECT_EQ(origin, "HF_HOME/hub");
  env_.set("HUGGINGFACE_HUB_CACHE", path("legacy"));
  EXPECT_EQ(hf_hub_cache_dir(&origin), path("legacy"));
  env_.set("HF_HUB_CACHE", "~/hub");
  EXPECT_EQ(hf_hub_cache_dir(&origin), path("home") + "/hub");
  EXPECT_EQ(origin, "HF_HUB_CACHE");

  // The default location works end to end.
  env_.clear_cache_variables();
  const std::string commit = "1111111111111111111111111111111111111111";
  const std::string snapshot = make_cached(path("home") + "/.cache/huggingface/hub", "org/name", commit);
  EXPECT_EQ(resolve_model("org/name").root, snapshot);
}

TEST_F(ModelDir, ExplainsACacheMiss) {
  env_.clear_cache_variables();
  env_.set("HF_HOME", path("hf"));
  const std::string message = error_of([&] { resolve_model("org/missing-model"); });
  EXPECT_CONTAINS(message, "model 'org/missing-model' is neither a directory ('");
  EXPECT_CONTAINS(
      message,
      "nor in the hugging face cache ('" + path("hf") +
          "/hub/models--org--missing-model' does not exist; the cache is HF_HOME/hub, set "
          "HF_HUB_CACHE or HF_HOME to use another); dpinfer never downloads: run "
          "`hf download org/missing-model` first, or pass the pipeline's directory");
  EXPECT_CONTAINS(error_of([&] { resolve_model("org/missing-model@v2"); }),
                  "`hf download org/missing-model --revision v2`");
}

TEST_F(ModelDir, ExplainsAMissingRevisionAndListsCachedSnapshots) {
  const std::string cache = path("hub");
  env_.set("HF_HUB_CACHE", cache);
  const std::string commit = "2222222222222222222222222222222222222222";
  make_cached(cache, "org/name", commit, "");  // a snapshot but no refs/main
  const std::string message = error_of([&] { resolve_model("org/name"); });
  EXPECT_CONTAINS(
      message,
      "model 'org/name' has no snapshot for revision 'main' in the hugging face cache ('" + cache +
          "/models--org--name/snapshots/main' does not exist; cached snapshots: " + commit +
          "); run `hf download org/name`, or pick a cached commit with org/name@<commit>");
  EXPECT_EQ(resolve_model("org/name@" + commit).root, cache + "/models--org--name/snapshots/" + commit);
  EXPECT_CONTAINS(error_of([&] { resolve_model("org/name@../../x"); }), "has a bad revision");
}

TEST_F(ModelDir, ExplainsABrokenBlobLink) {
  const std::string cache = path("hub");
  env_.set("HF_HUB_CACHE", cache);
  const std::string snapshot =
      make_cached(cache, "org/name", "3333333333333333333333333333333333333333");
  fs::remove(fs::canonical(snapshot + "/vae/config.json"));
  EXPECT_CONTAINS(error_of([&] { resolve_model("org/name"); }),
                  "'" + snapshot +
                      "/vae/config.json' is a broken link (its blob is missing, perhaps from an "
                      "interrupted download); download the model again");
}

TEST_F(ModelDir, PicksVariantsPerComponentAsDiffusersDoes) {
  make_pipeline(path("sd"));
  write_file(path("sd/text_encoder/model.fp16.safetensors"), "");
  write_file(path("sd/text_encoder/model.safetensors"), "");
  write_file(path("sd/unet/diffusion_pytorch_model.safetensors"), "");
  const auto model = resolve_model(path("sd"), "fp16");
  EXPECT_EQ(model.at("text_encoder").variant, "fp16");
  EXPECT_EQ(model.at("unet").variant, "");
  EXPECT_EQ(model.at("vae").variant, "");
  EXPECT_EQ(model.at("tokenizer").variant, "");
  EXPECT_CONTAINS(
      error_of([&] { resolve_model(path("sd"), "bf16"); }),
      "'" + path("sd") + "' has no bf16 weights in unet, text_encoder or vae; drop --variant bf16");
}

/// The tiny pipelines other fixtures make (tests/data/pipelines); skipped when absent.
class ModelDirPipelines : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelDirPipelines, ResolvesAndFindsValidWeights) {
  const std::string root = DPINFER_TEST_DATA_DIR "/pipelines/" + GetParam();
  if (!fs::exists(root + "/model_index.json")) GTEST_SKIP() << root << " is not there yet";
  const std::string variant = GetParam() == "tiny-sd2v" ? "fp16" : "";
  const auto model = resolve_model(root, variant);
  EXPECT_EQ(model.root, root);
  for (const Component& component : model.components) {
    if (!pipeline::has_weights(component.role)) continue;
    const Component* c = &component;
    const WeightFiles weights = find_weight_files(c->path, c->variant);
    ASSERT_FALSE(weights.files.empty()) << c->name;
    for (const std::string& file : weights.files) {
      auto st = io::SafetensorsFile::open(file);
      EXPECT_FALSE(st->tensors().empty()) << file;
    }
    if (GetParam() == "tiny-3down" && c->name == "unet") {
      EXPECT_FALSE(weights.index.empty());
      EXPECT_GT(weights.files.size(), 1u);
    }
    if (GetParam() == "tiny-3down" && c->name == "vae") {
      // Saved with the legacy attention names, which find_model_class("AutoencoderKL")->renames maps.
      auto st = io::SafetensorsFile::open(weights.files[0]);
      bool legacy = false;
      for (const auto& t : st->tensors()) legacy = legacy || t.name.find(".query.") != std::string::npos;
      EXPECT_TRUE(legacy);
    }
  }
  if (!variant.empty()) {
    EXPECT_EQ(model.at("text_encoder").variant, variant);
  }
  // SD3 without T5: text_encoder_3 and tokenizer_3 are null in model_index.json, optional in the family;
  // tiny-sd3.5-t5 has them, as real SD3 folders do.
  if (GetParam().rfind("tiny-sd3", 0) == 0) {
    const bool t5 = GetParam() == "tiny-sd3.5-t5";
    EXPECT_EQ(model.find("text_encoder_3") != nullptr, t5);
    EXPECT_EQ(model.find("tokenizer_3") != nullptr, t5);
    EXPECT_NE(model.find("text_encoder_2"), nullptr);
    if (t5) {
      EXPECT_EQ(model.at("text_encoder_3").class_name, "T5EncoderModel");
      EXPECT_EQ(model.at("tokenizer_3").class_name, "T5TokenizerFast");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ModelDir, ModelDirPipelines,
                         ::testing::Values("tiny-sd1", "tiny-sd2v", "tiny-3down", "tiny-sdxl", "tiny-sdxl-alt",
                                           "tiny-z-image", "tiny-z-image-alt", "tiny-sd3", "tiny-sd3.5",
                                           "tiny-sd3.5-t5"),
                         dpinfer::test::FixtureParamName());

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::test

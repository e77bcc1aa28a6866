// io::find_lora_file: a LoRA named by file, folder or hub id, found as diffusers'
// load_lora_weights finds it, offline in a hub cache laid out as huggingface_hub lays it out.
#include "dpinfer/io/lora_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// HF_HUB_CACHE pointing at a scratch cache for one test, put back after it.
class LoraFile : public ::testing::Test {
 protected:
  LoraFile() {
    if (const char* v = std::getenv("HF_HUB_CACHE")) saved_ = v;
    ::setenv("HF_HUB_CACHE", dir_.file("hub").c_str(), 1);
  }
  ~LoraFile() override {
    if (saved_)
      ::setenv("HF_HUB_CACHE", saved_->c_str(), 1);
    else
      ::unsetenv("HF_HUB_CACHE");
  }

  /// A cached repo org/name: refs/<ref> -> commit, and `files` in its snapshot, each a link to a blob.
  std::string cache_repo(const std::string& repo, const std::string& commit, const std::vector<std::string>& files,
                         const std::string& ref = "main") {
    const std::string root = dir_.file("hub/models--" + repo.substr(0, repo.find('/')) + "--" + repo.substr(repo.find('/') + 1));
    fs::create_directories(root + "/refs");
    fs::create_directories(root + "/blobs");
    write_file(root + "/refs/" + ref, commit + "\n");
    const std::string snapshot = root + "/snapshots/" + commit;
    for (const std::string& f : files) {
      const std::string blob = root + "/blobs/" + std::to_string(std::hash<std::string>{}(f));
      write_file(blob, "weights of " + f);
      fs::create_directories(fs::path(snapshot + "/" + f).parent_path());
      fs::create_symlink(blob, snapshot + "/" + f);
    }
    return snapshot;
  }

  std::string error_of(const std::string& given) {
    try {
      io::find_lora_file(given, "--lora");
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  }

  TempDir dir_;
  std::optional<std::string> saved_;
};

TEST_F(LoraFile, AFileIsItselfAndAFolderItsOneSafetensorsFile) {
  write_file(dir_.file("style.safetensors"), "x");
  EXPECT_EQ(io::find_lora_file(dir_.file("style.safetensors"), "--lora"), dir_.file("style.safetensors"));
  fs::create_directories(dir_.file("trained/checkpoint-500"));
  write_file(dir_.file("trained/pytorch_lora_weights.safetensors"), "x");
  write_file(dir_.file("trained/checkpoint-500/model.safetensors"), "x");  // not top level, and a checkpoint
  write_file(dir_.file("trained/notes.txt"), "x");
  EXPECT_EQ(io::find_lora_file(dir_.file("trained"), "--lora"), dir_.file("trained/pytorch_lora_weights.safetensors"));
  fs::create_directories(dir_.file("two"));
  write_file(dir_.file("two/a.safetensors"), "x");
  write_file(dir_.file("two/b.safetensors"), "x");
  EXPECT_EQ(error_of(dir_.file("two")), "--lora: LoRA '" + dir_.file("two") +
                                            "' is a folder with 2 .safetensors files (a.safetensors, b.safetensors); "
                                            "name one, e.g. '" + dir_.file("two") + "/a.safetensors'");
  fs::create_directories(dir_.file("empty"));
  EXPECT_NE(error_of(dir_.file("empty")).find("is a folder with no .safetensors LoRA file"), std::string::npos);
}

TEST_F(LoraFile, AHubIdIsItsCachedSnapshotsOneLoraFile) {
  const std::string snap = cache_repo("XLabs-AI/flux-RealismLora", "abc123", {"lora.safetensors", "README.md"});
  EXPECT_EQ(io::find_lora_file("XLabs-AI/flux-RealismLora", "--lora"), snap + "/lora.safetensors");
  // diffusers' guess: pytorch_lora_weights.safetensors wins; scheduler/optimizer/checkpoint files are no LoRA.
  const std::string trained = cache_repo("me/dreambooth", "c0ffee",
                                         {"pytorch_lora_weights.safetensors", "other.safetensors",
                                          "checkpoint-100/pytorch_lora_weights.safetensors",
                                          "optimizer.safetensors"});
  EXPECT_EQ(io::find_lora_file("me/dreambooth", "--lora"), trained + "/pytorch_lora_weights.safetensors");
  // Any depth in a repo, as the hub lists it.
  const std::string deep = cache_repo("me/deep", "d00d", {"loras/v2/style.safetensors"});
  EXPECT_EQ(io::find_lora_file("me/deep", "--lora"), deep + "/loras/v2/style.safetensors");
}

TEST_F(LoraFile, AHubIdWithAPathOrARevisionNamesOneFile) {
  const std::string main = cache_repo("org/pack", "aaa111", {"a.safetensors", "sub/b.safetensors"});
  const std::string v1 = cache_repo("org/pack", "bbb222", {"a.safetensors"}, "v1");
  EXPECT_EQ(error_of("org/pack"), "--lora: LoRA 'org/pack' is a hub repo with 2 .safetensors files (a.safetensors, "
                                  "sub/b.safetensors); name one, e.g. 'org/pack/a.safetensors'");
  EXPECT_EQ(io::find_lora_file("org/pack/sub/b.safetensors", "--lora"), main + "/sub/b.safetensors");
  EXPECT_EQ(io::find_lora_file("org/pack@v1", "--lora"), v1 + "/a.safetensors");
  EXPECT_EQ(io::find_lora_file("org/pack@bbb222/a.safetensors", "--lora"), v1 + "/a.safetensors");
  EXPECT_EQ(error_of("org/pack/c.safetensors"),
            "--lora: LoRA 'org/pack/c.safetensors': the cached snapshot aaa111 of org/pack has no file "
            "'c.safetensors' (its .safetensors files: a.safetensors, sub/b.safetensors); run `hf download org/pack "
            "c.safetensors` or name a file it has");
  EXPECT_NE(error_of("org/pack/../pack/a.safetensors").find("has no file"), std::string::npos);
}

TEST_F(LoraFile, WhatIsNeitherSaysWhereItLookedAndHowToFillTheCache) {
  const std::string missing = error_of("org/absent");
  EXPECT_NE(missing.find("--lora: LoRA 'org/absent' is neither a file ("), std::string::npos) << missing;
  EXPECT_NE(missing.find("nor in the hugging face cache ('" + dir_.file("hub") + "/models--org--absent' does not "
                         "exist; the cache is HF_HUB_CACHE"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("run `hf download org/absent` first, or pass the LoRA file"), std::string::npos) << missing;
  const std::string relative = error_of("no_such_file.safetensors");
  EXPECT_NE(relative.find("--lora: LoRA 'no_such_file.safetensors' is not a file (relative paths start at the "
                          "current directory"),
            std::string::npos)
      << relative;
  EXPECT_NE(error_of("/abs/org/name").find("is not a file; give a .safetensors LoRA file, a folder holding one, or "
                                           "a hub id (org/name)"),
            std::string::npos);
  cache_repo("org/norev", "eee555", {"a.safetensors"});
  EXPECT_NE(error_of("org/norev@v9").find("has no snapshot for revision 'v9'"), std::string::npos);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

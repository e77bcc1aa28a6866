// What `dpinfer launch` checks before it starts a worker, and `dpinfer generate`
// before it loads a model (plan/preflight.h): issue 11, items 9 and 15.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "dpinfer/plan/preflight.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// The UsageError message of `check`, or "" when it passes.
template <typename F>
std::string refusal(F&& check) {
  try {
    check();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string prompts_refusal(const std::string& path) {
  return refusal([&] { plan::check_prompts_path(path); });
}


TEST(Preflight, AProgramIsNoPromptsFile) {
  TempDir dir;
  write_file(dir.file("run.py"), "import torch\nprint('hi')\n");
  write_file(dir.file("job.sh"), "echo hi\n");
  write_file(dir.file("script"), "#!/usr/bin/env python3\nprint('hi')\n");
  write_file(dir.file("tool"), "a prompt\n");
  ::chmod(dir.file("tool").c_str(), 0755);
  for (const char* name : {"run.py", "job.sh", "script", "tool", "never-written.PY"}) {
    std::string e = prompts_refusal(dir.file(name));
    EXPECT_NE(e.find("to run a program as the worker, put it after '--'"), std::string::npos) << name << ": " << e;
  }
  EXPECT_NE(prompts_refusal(dir.file("script")).find("starts with '#!'"), std::string::npos);
  EXPECT_NE(prompts_refusal(dir.file("tool")).find("is executable"), std::string::npos);
}

TEST(Preflight, TextAndJsonLinesPassWhateverTheirMode) {
  TempDir dir;
  for (const char* name : {"p.txt", "p.jsonl", "p.JSONL", "prompts", "captions.csv", "p.prompts"}) {
    write_file(dir.file(name), "a red circle\n");
    EXPECT_EQ(prompts_refusal(dir.file(name)), "") << name;
  }
  // vfat, ntfs and WSL's drvfs mark every file executable.
  ::chmod(dir.file("p.txt").c_str(), 0777);
  ::chmod(dir.file("p.jsonl").c_str(), 0777);
  EXPECT_EQ(prompts_refusal(dir.file("p.txt")), "");
  EXPECT_EQ(prompts_refusal(dir.file("p.jsonl")), "");
  EXPECT_EQ(prompts_refusal("-"), "") << "stdin";
}

TEST(Preflight, MissingDirectoryAndJsonDocumentAreRefused) {
  TempDir dir;
  EXPECT_NE(prompts_refusal(dir.file("nope.txt")).find("No such file or directory"), std::string::npos);
  // A directory is a folder of prompt files (DPG-Bench's prompts/), which the reader judges.
  EXPECT_EQ(prompts_refusal(dir.path()), "");
  write_file(dir.file("p.json"), "[{\"prompt\": \"a\"}]");
  EXPECT_NE(prompts_refusal(dir.file("p.json")).find("name the file .jsonl"), std::string::npos);
}

// Issue 11, item 10: a link to itself, or to nothing, is said as such, not "missing".
TEST(Preflight, LinksThatLoopOrDangleAreNamedAsSuch) {
  TempDir dir;
  ASSERT_EQ(::symlink("loop.txt", dir.file("loop.txt").c_str()), 0);
  ASSERT_EQ(::symlink("gone.txt", dir.file("dangling.txt").c_str()), 0);
  EXPECT_EQ(prompts_refusal(dir.file("loop.txt")),
            "PROMPTS '" + dir.file("loop.txt") + "': a loop of symbolic links; give a .txt, .jsonl, .csv, .tsv or .parquet file of prompts");
  EXPECT_NE(prompts_refusal(dir.file("dangling.txt")).find(": a broken symbolic link (its target is missing)"),
            std::string::npos);
  ASSERT_EQ(::symlink("model", dir.file("model").c_str()), 0);
  const std::string model = refusal([&] { plan::check_model_spec(dir.file("model")); });
  EXPECT_EQ(model, "--model '" + dir.file("model") +
                       "' is a loop of symbolic links; fix the link, or pass the pipeline's directory");
}

TEST(Preflight, OutputDirectoryMustBeWritableOrMakeable) {
  TempDir dir;
  write_file(dir.file("afile"), "");
  auto out_refusal = [](const std::string& p) { return refusal([&] { plan::check_output_dir(p); }); };
  EXPECT_EQ(out_refusal(dir.path()), "");
  EXPECT_EQ(out_refusal(dir.file("new/deeper")), "") << "made by the worker";
  EXPECT_NE(out_refusal(dir.file("afile")).find("is a file, not a directory"), std::string::npos);
  EXPECT_NE(out_refusal(dir.file("afile/sub")).find("cannot be made"), std::string::npos);
  TmpfsMount ro(dir.file("ro"), "64k", /*read_only=*/true);
  if (!ro.ok()) GTEST_SKIP() << ro.why();
  EXPECT_NE(out_refusal(dir.file("ro")).find("is not writable (Read-only file system)"), std::string::npos);
  EXPECT_NE(out_refusal(dir.file("ro/out")).find("cannot be made"), std::string::npos);
}

TEST(Preflight, ModelSpecIsCheckedAsFarAsItCanBeWithoutReadingIt) {
  TempDir dir;
  auto model_refusal = [](const std::string& m) { return refusal([&] { plan::check_model_spec(m); }); };
  std::filesystem::create_directories(dir.file("sd/unet"));
  write_file(dir.file("sd/model_index.json"), "{}");
  std::filesystem::create_directories(dir.file("sd/unet"));
  EXPECT_EQ(model_refusal(""), "") << "the default model";
  EXPECT_EQ(model_refusal(dir.file("sd")), "");
  EXPECT_NE(model_refusal(dir.file("sd/unet")).find("has no model_index.json"), std::string::npos);
  write_file(dir.file("model.safetensors"), "x");
  EXPECT_EQ(model_refusal(dir.file("model.safetensors")), "") << "a file is the worker's to judge";
  EXPECT_NE(model_refusal(dir.file("no/such/dir")).find("is neither a directory"), std::string::npos);
  // Hub ids: the cache folder must be there.
  ::setenv("HF_HUB_CACHE", dir.file("hub").c_str(), 1);
  std::filesystem::create_directories(dir.file("hub/models--org--cached"));
  EXPECT_EQ(model_refusal("org/cached"), "");
  EXPECT_EQ(model_refusal("org/cached@v1"), "") << "the revision is the worker's to find";
  std::string e = model_refusal("org/missing");
  EXPECT_NE(e.find("models--org--missing' does not exist; the cache is HF_HUB_CACHE"), std::string::npos) << e;
  ::unsetenv("HF_HUB_CACHE");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

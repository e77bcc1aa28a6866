#include "dpinfer/plan/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dpinfer/io/hub_cache.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/process.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {
namespace {

namespace fs = std::filesystem;

/// "to run a program as the worker, put it after '--'", with the command line for `path`.
std::string program_hint(const std::string& path, const std::string& ext) {
  const std::string command = ext == ".py" || ext == ".pyw" ? "python3 " + path : ext == ".sh" ? "sh " + path : path;
  return "to run a program as the worker, put it after '--', e.g. dpinfer launch --nproc-per-node 2 -- " +
         printable(command);
}

std::string lower_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool is_program_extension(const std::string& ext) {
  static const char* const kPrograms[] = {".py", ".pyw", ".ipynb", ".sh", ".bash", ".zsh",
                                          ".ksh", ".fish", ".pl", ".rb", ".js", ".lua"};
  return std::any_of(std::begin(kPrograms), std::end(kPrograms), [&](const char* p) { return ext == p; });
}

}  // namespace

void check_prompts_path(const std::string& path) {
  if (path == "-") return;
  const std::string ext = lower_extension(path);
  if (is_program_extension(ext))
    throw UsageError("PROMPTS " + quote(path) + " looks like a program (" + ext +
                     "), not a prompts file (.txt, .jsonl, .csv, .tsv or .parquet); " + program_hint(path, ext));
  if (ext == ".json")
    throw UsageError("PROMPTS " + quote(path) +
                     " is a .json file, one JSON document; dpinfer reads JSON lines: write one object per line "
                     "({\"prompt\": ...}) and name the file .jsonl");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;  // a loop or a dangling link is said as such, never "missing"
    throw UsageError("PROMPTS " + quote(path) + ": " + open_error_text(path, err) +
                     (err == ENOENT || err == ELOOP ? "; give a .txt, .jsonl, .csv, .tsv or .parquet file of prompts" : ""));
  }
  if (S_ISDIR(st.st_mode)) return;  // a folder of one prompt per .txt file (io::read_prompt_folder)
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
    throw UsageError("PROMPTS " + quote(path) + " is not a regular file; give a .txt, .jsonl, .csv, .tsv or .parquet file");
  if (S_ISREG(st.st_mode)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("PROMPTS " + quote(path) + ": cannot read it (" + std::strerror(errno) + ")");
    char head[2] = {};
    in.read(head, 2);
    if (in.gcount() == 2 && head[0] == '#' && head[1] == '!')
      throw UsageError("PROMPTS " + quote(path) + " starts with '#!': it is a script, not a prompts file; " +
                       program_hint(path, ext));
    // Filesystems without permissions (vfat, ntfs, WSL's drvfs) mark every file executable:
    // a file named .txt or .jsonl is a prompts file whatever its mode says.
    if ((st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)) && ext != ".txt" && ext != ".jsonl" && ext != ".csv" && ext != ".tsv" &&
        ext != ".parquet")
      throw UsageError("PROMPTS " + quote(path) + " is executable: it looks like a program, not a prompts file; " +
                       program_hint(path, ext) + " (or, if it holds prompts, name it .txt or .jsonl)");
  }
}

void check_output_dir(const std::string& out) {
  std::error_code ec;
  fs::path p(out.empty() ? "." : out);
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec))
      throw UsageError("--out " + quote(out) + " is a file, not a directory; give a directory");
    if (::access(p.c_str(), W_OK | X_OK) != 0)
      throw UsageError("--out " + quote(out) + " is not writable (" + std::strerror(errno) +
                       "); give a directory you can write, or fix its permissions");
    return;
  }
  // It will be made: the nearest existing ancestor must be a writable directory.
  fs::path parent = fs::absolute(p, ec).lexically_normal();
  while (parent.has_parent_path() && parent != parent.parent_path() && !fs::exists(parent, ec))
    parent = parent.parent_path();
  if (!fs::is_directory(parent, ec))
    throw UsageError("--out " + quote(out) + " cannot be made: " + quote(parent.string()) +
                     " is a file; give another directory");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw UsageError("--out " + quote(out) + " cannot be made: " + quote(parent.string()) + " is not writable (" +
                     std::strerror(errno) + "); give a directory you can write");
}

namespace {

/// Whether `name` (no '/') is an embedded model, where the worker looks for one (worker/default_model.cpp).
bool is_embedded_model(const std::string& name) {
  if (name.find('/') != std::string::npos) return false;
  std::vector<std::string> dirs;
  if (const char* data = std::getenv("DPINFER_DATA_DIR"); data != nullptr && *data != '\0')
    dirs.push_back(std::string(data) + "/models/" + name);
  dirs.push_back(self_exe_dir() + "/../share/dpinfer/models/" + name);
  std::error_code ec;
  return std::any_of(dirs.begin(), dirs.end(),
                     [&](const std::string& d) { return fs::exists(fs::path(d) / "model_index.json", ec); });
}

}  // namespace

void check_model_spec(const std::string& spec) {
  if (spec.empty()) return;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    if (!fs::exists(fs::path(spec) / "model_index.json", ec))
      throw UsageError("--model " + quote(spec) +
                       " has no model_index.json; pass the diffusers pipeline directory, the folder holding "
                       "model_index.json, unet/, vae/, ...");
    return;
  }
  if (fs::exists(spec, ec)) return;  // a file: the worker says what it makes of it
  struct stat link {};
  if (::lstat(spec.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    struct stat target {};
    const int err = ::stat(spec.c_str(), &target) == 0 ? 0 : errno;
    throw UsageError("--model " + quote(spec) + " is " + open_error_text(spec, err) +
                     "; fix the link, or pass the pipeline's directory");
  }
  if (is_embedded_model(spec)) return;  // `--model dpinfer-shapes-dit-64`
  const std::string repo = spec.substr(0, spec.rfind('@'));
  const std::string absolute = fs::absolute(spec, ec).string();
  if (!io::is_hub_id(repo))
    throw UsageError("--model " + quote(spec) + " is neither a directory (" + quote(absolute) +
                     " does not exist) nor a hugging face hub id (org/name or org/name@revision)");
  std::string origin;
  const std::string cache = io::hf_hub_cache_dir(&origin);
  const std::string repo_dir = io::hub_repo_cache_dir(cache, repo);
  if (!fs::is_directory(repo_dir, ec))
    throw UsageError("--model " + quote(spec) + " is neither a directory (" + quote(absolute) +
                     " does not exist) nor in the hugging face cache (" + quote(repo_dir) +
                     " does not exist; the cache is " + origin +
                     ", set HF_HUB_CACHE or HF_HOME to use another); dpinfer never downloads: download it first (hf "
                     "download " + printable(repo) + "), or pass the pipeline's directory");
}

}  // namespace dpinfer::plan

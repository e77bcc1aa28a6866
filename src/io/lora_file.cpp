#include "dpinfer/io/lora_file.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "dpinfer/io/hub_cache.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDiffusersLoraName = "pytorch_lora_weights.safetensors";  // diffusers' LORA_WEIGHT_NAME_SAFE

/// The .safetensors files under `dir` (relative, sorted), the whole tree when `recursive`.
std::vector<std::string> safetensors_files(const fs::path& dir, bool recursive) {
  std::vector<std::string> found;
  std::error_code ec;
  const auto add = [&](const fs::directory_entry& e) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec))  // a snapshot's links to blobs count
      found.push_back(e.path().lexically_relative(dir).generic_string());
  };
  if (recursive) {
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) add(*it);
  } else {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) add(*it);
  }
  std::sort(found.begin(), found.end());
  return found;
}

/// _best_guess_weight_name's filters, then one file or an error naming the candidates.
std::string the_lora_file(const fs::path& dir, bool recursive, const std::string& named, const std::string& where,
                          const std::string& form) {
  std::vector<std::string> files;
  for (const std::string& f : safetensors_files(dir, recursive))
    if (f.find("scheduler") == std::string::npos && f.find("optimizer") == std::string::npos &&
        f.find("checkpoint") == std::string::npos)
      files.push_back(f);
  const auto diffusers_named = [](const std::string& f) { return ends_with(f, kDiffusersLoraName); };
  if (std::any_of(files.begin(), files.end(), diffusers_named))
    files.erase(std::remove_if(files.begin(), files.end(), [&](const std::string& f) { return !diffusers_named(f); }),
                files.end());
  if (files.size() == 1) return (dir / files[0]).lexically_normal().string();
  if (files.empty())
    throw InputError(where + ": LoRA " + quote(named) + " is " + form + " with no .safetensors LoRA file in " +
                     quote(dir.string()) + "; give the LoRA's .safetensors file");
  std::vector<std::string> shown(files.begin(), files.begin() + std::min<size_t>(files.size(), 5));
  throw InputError(where + ": LoRA " + quote(named) + " is " + form + " with " + std::to_string(files.size()) +
                   " .safetensors files (" + join(shown) + (files.size() > 5 ? ", ..." : "") +
                   "); name one, e.g. " + quote(named + "/" + files[0]));
}

}  // namespace

std::string find_lora_file(const std::string& given, const std::string& where) {
  std::error_code ec;
  const fs::path local = fs::absolute(given, ec).lexically_normal();
  if (!ec && fs::is_regular_file(local, ec)) return local.string();
  if (!ec && fs::is_directory(local, ec)) return the_lora_file(local, false, given, where, "a folder");

  // A hub id, alone or followed by a path in the repo: the first two parts, with any @revision.
  const size_t first = given.find('/');
  const size_t second = first == std::string::npos ? std::string::npos : given.find('/', first + 1);
  const std::string spec = given.substr(0, second);
  const std::string repo = spec.substr(0, spec.rfind('@'));
  if (!is_hub_id(repo) || fs::path(given).is_absolute()) {
    throw InputError(where + ": LoRA " + quote(given) + " is not a file" +
                     (fs::path(given).is_relative() ? " (relative paths start at the current directory, " +
                                                          quote(fs::current_path(ec).string()) + ")"
                                                    : std::string()) +
                     "; give a .safetensors LoRA file, a folder holding one, or a hub id (org/name) in the "
                     "hugging face cache");
  }
  std::string commit;
  fs::path snapshot;
  try {
    snapshot = hub_snapshot_dir(spec, "LoRA", &commit);
  } catch (const Error& e) {
    throw InputError(where + ": " + e.what());
  }
  if (second == std::string::npos) return the_lora_file(snapshot, true, given, where, "a hub repo");
  const std::string inside = given.substr(second + 1);
  const fs::path file = (snapshot / inside).lexically_normal();
  if (inside.empty() || inside.find("..") != std::string::npos || !fs::is_regular_file(file, ec)) {
    std::vector<std::string> files = safetensors_files(snapshot, true);
    files.resize(std::min<size_t>(files.size(), 5));
    throw InputError(where + ": LoRA " + quote(given) + ": the cached snapshot " + commit + " of " + spec +
                     " has no file " + quote(inside) + " (its .safetensors files: " +
                     (files.empty() ? std::string("none") : join(files)) + "); run " +
                     hf_download_command(repo, spec.size() > repo.size() ? spec.substr(repo.size() + 1) : "", inside) +
                     " or name a file it has");
  }
  return file.string();
}

}  // namespace dpinfer::io

#pragma once
// The hashes an image's infotext and record name its model and LoRAs by, as AUTOMATIC1111
// computes them (modules/hashes.py), each computed once per output folder and kept in
// <out>/hashes.json beside run.json, keyed by path, size and modification time: a changed
// file is hashed again, an unchanged one never, however many images a run makes.
//
//  - Model hash: the first 10 hex digits of the SHA-256 of the checkpoint file (A1111's
//    calculate_sha256). For a diffusers directory, which A1111 has no hash for, dpinfer's
//    rule: the SHA-256 of the denoiser's weight files (unet/ or transformer/, the files the
//    run loads, with --variant) read one after the other in file-name order; for the usual
//    one-file UNet that is the SHA-256 of that file.
//  - LoRA hash: A1111's "addnet" hash (extensions-builtin/Lora/network.py read_hash via
//    hashes.sha256(..., use_addnet_hash=True), from kohya sd-scripts' train_util.py): the
//    SHA-256 of a .safetensors file's tensor data, without its 8-byte length and JSON header
//    (so editing the metadata keeps the hash), or the `sshs_model_hash` kohya writes into the
//    metadata when the file has one; the infotext shows its first 12 hex digits.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dpinfer::worker {

class HashCache {
 public:
  /// The cache of `out_dir` (<out_dir>/hashes.json); a missing or unreadable cache is empty.
  explicit HashCache(std::string out_dir);

  /// The SHA-256 (64 hex digits) of `files` read one after the other, from the cache when
  /// every file's size and modification time are those cached. Throws InputError naming a
  /// file that cannot be read.
  std::string files_sha256(const std::vector<std::string>& files);

  /// A1111's LoRA hash of the safetensors file `path` (64 hex digits; see above).
  std::string lora_sha256(const std::string& path);

  /// Writes the cache (atomically) when something was hashed since it was read.
  void save();

 private:
  std::string cached(const std::string& key, const std::vector<std::string>& files, bool skip_header);

  std::string path_;
  nlohmann::json entries_ = nlohmann::json::object();
  bool changed_ = false;
};

/// The SHA-256 (64 hex digits) of `files` read one after the other, uncached. Throws InputError
/// naming a file that cannot be read.
std::string sha256_of_files(const std::vector<std::string>& files);

/// SHA-256 of `bytes` in memory (64 hex digits): what sha256_of_files() gives for a file holding them.
std::string sha256_of_bytes(const std::string& bytes);

/// What a run's images name their model and LoRAs by: the full SHA-256s.
struct RunHashes {
  std::string model;                          ///< empty when the model has no files to hash
  std::map<std::string, std::string> loras;   ///< absolute path -> SHA-256
};

/// A1111's short forms: 10 digits for a model, 12 for a LoRA.
inline std::string model_short_hash(const std::string& sha256) { return sha256.substr(0, 10); }
inline std::string lora_short_hash(const std::string& sha256) { return sha256.substr(0, 12); }

}  // namespace dpinfer::worker

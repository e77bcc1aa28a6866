#pragma once
// The per-rank manifests and their merge into the Hugging Face imagefolder
// metadata (`metadata.jsonl`, with a `file_name` column) and `failures.jsonl`.

#include <nlohmann/json.hpp>
#include <string>

namespace dpinfer::io {

/// Appends one JSON object per line to a manifest file, each line written with a
/// single write(2) so that a kill leaves at most a torn last line.
class ManifestWriter {
 public:
  /// Opens (creating, appending) `path`. Throws Error.
  explicit ManifestWriter(const std::string& path);
  ~ManifestWriter();
  ManifestWriter(const ManifestWriter&) = delete;
  ManifestWriter& operator=(const ManifestWriter&) = delete;

  void append(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

struct MergeResult {
  size_t ok = 0;       ///< rows in metadata.jsonl
  size_t failed = 0;   ///< rows in failures.jsonl
  size_t torn_lines = 0;  ///< unreadable lines skipped (a writer killed mid-line)
};

/// Merges every `manifest*.jsonl` in `dir` into `dir/metadata.jsonl` (status "ok"
/// records whose file exists, sorted by "index") and `dir/failures.jsonl` (items
/// whose latest record is an error and that have no image). When an item has several
/// records (resumed or overwritten runs), the latest "finished_at" wins. Both files
/// are written atomically.
MergeResult merge_manifests(const std::string& dir);

}  // namespace dpinfer::io

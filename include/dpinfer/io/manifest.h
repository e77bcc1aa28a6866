#pragma once
// The per-rank manifests and their merge into the Hugging Face imagefolder
// metadata (`metadata.jsonl`, with a `file_name` column) and `failures.jsonl`.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpinfer::io {

/// Appends one JSON object per line to a manifest file, each line written with a
/// single write(2) so that a kill leaves at most a torn last line.
class ManifestWriter {
 public:
  /// Opens (creating, appending) `path`, ending a torn last line first. Throws Error.
  explicit ManifestWriter(const std::string& path);
  ~ManifestWriter();
  ManifestWriter(const ManifestWriter&) = delete;
  ManifestWriter& operator=(const ManifestWriter&) = delete;

  void append(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  void append_raw(const std::string& line);  ///< all of `line`, one write(2) unless the kernel splits it

  std::string path_;
  int fd_ = -1;
};

/// How an item stands after all its records: what the merge does with it.
enum class ItemState {
  kDone,         ///< latest record "ok" and its PNG exists: a metadata.jsonl row
  kFailed,       ///< latest record an error: a failures.jsonl row
  kMissingFile,  ///< latest record "ok" but its PNG is gone: in neither file (a resume regenerates it)
};

/// Two manifests whose latest records of one item (each manifest's own latest, by
/// "finished_at") disagree on what the item is (prompt, seed, size, ...): the same
/// output directory was used for different prompt files or options. A record that a
/// later one in its own manifest superseded (an --overwrite rerun) is not compared.
struct ManifestConflict {
  int64_t index = 0;
  std::string field;
  std::string first_manifest, first_value;
  std::string second_manifest, second_value;
  /// One line for the user, naming both manifests and both values.
  std::string describe() const;
};

/// One item as the manifests of a directory record it.
struct ManifestEntry {
  nlohmann::json record;  ///< the latest record: largest "finished_at"; ties go to the later manifest or line
  std::string manifest;   ///< file name of the manifest holding `record`
  ItemState state = ItemState::kFailed;
};

/// Every `manifest*.jsonl` of a directory, read (read_manifests).
struct ManifestSet {
  std::vector<std::string> manifests;       ///< file names, sorted
  std::map<int64_t, ManifestEntry> items;   ///< by item index
  size_t torn_lines = 0;                    ///< unreadable lines skipped (a writer killed mid-line)
  /// Items with an "ok" record in more than one manifest: generated twice (e.g. two
  /// array tasks with overlapping --shard specs, or a rerun with another world size).
  size_t duplicates = 0;
  std::vector<ManifestConflict> conflicts;  ///< at most one per item
};

/// Reads every `manifest*.jsonl` in `dir` (names sorted, so the result does not
/// depend on the directory order). Records of older versions come in today's names:
/// their "image" (the image number within its JSONL line) is "image_index", since
/// Hugging Face imagefolder reserves "image" (and "file_name", "file_names",
/// "*_file_name", "*_file_names") for its picture columns. Throws Error when `dir`
/// cannot be listed.
ManifestSet read_manifests(const std::string& dir);

struct MergeResult {
  size_t ok = 0;       ///< rows in metadata.jsonl
  size_t failed = 0;   ///< rows in failures.jsonl
  size_t torn_lines = 0;  ///< unreadable lines skipped (a writer killed mid-line)
  size_t duplicates = 0;  ///< see ManifestSet::duplicates
  size_t conflicts = 0;   ///< see ManifestSet::conflicts; the latest record won each
  /// --layout webdataset (records with a "key"): OUT/index.parquet written, and how many shards'
  /// own indexes were missing (a run stopped between a shard's tar and its index) and written.
  bool dataset_index = false;
  size_t shard_indexes_written = 0;
  std::string no_index_why;  ///< a webdataset run's indexes not written: parquet support is missing
};

/// Writes `dir/metadata.jsonl` (the kDone items' latest records, sorted by "index",
/// without "finished_at") and `dir/failures.jsonl` (the kFailed ones), atomically. For a
/// --layout webdataset run, also the parquet indexes (io/shard_index.h): each published shard's
/// that is missing, and `dir/index.parquet` over every shard.
MergeResult write_merged(const std::string& dir, const ManifestSet& set);

/// read_manifests() then write_merged(): every `manifest*.jsonl` in `dir` into
/// `dir/metadata.jsonl` (status "ok" records whose file exists, sorted by "index")
/// and `dir/failures.jsonl` (items whose latest record is an error). When an item
/// has several records (resumed or overwritten runs), the latest "finished_at" wins.
/// Both files are written atomically.
MergeResult merge_manifests(const std::string& dir);

}  // namespace dpinfer::io

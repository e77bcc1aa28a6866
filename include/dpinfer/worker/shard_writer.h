#pragma once
// --layout webdataset (plan::Layout::kWebDataset): a rank's images go into WebDataset shards,
// img2dataset's layout: OUT/<key of the shard's first item>.tar holds, per item, <key>.<ext>
// (the image), <key>.txt (its prompt) and <key>.json (its record), up to --shard-size items,
// OUT/<key>.parquet indexes them (io/shard_index.h) and OUT/<key>_stats.json counts them. A key is
// the item index, 9 digits.
//
// Exactly once. A shard's bytes are made durable (fsync) first, then its items' records are
// appended to the rank's manifest, naming the shard, and then the shard is renamed into place,
// then its index (written and made durable beside it before the records).
// - A stop before the records leaves only a temporary, which the next run removes. The shard's
//   items are unrecorded, so they are made again.
// - A stop between the records and the rename leaves records of a shard that is not there. Resume
//   and merge count only the records whose shard exists, so those items are made again too.
// A truncated .tar never appears under its name, and no item is in two published shards: a
// published shard's items are recorded, and so skipped by every later run.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/io/tar_writer.h"

namespace dpinfer::worker {

class ShardWriter {
 public:
  ShardWriter(std::string out_dir, int64_t shard_size, io::ManifestWriter& manifest, int rank);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  /// Adds a made item: `record` is its manifest record (status ok), `image` its encoded file under
  /// `image_name`, "<key>.<ext>" (plan::item_file_name in this layout). Publishes the shard once it
  /// holds --shard-size items.
  void add(nlohmann::json record, const std::string& image_name, const std::string& image, const std::string& prompt);
  /// Publishes the open shard, if it holds any item: at the end of a run, or of a stopped one.
  void commit();

 private:
  std::string out_dir_;
  int64_t shard_size_;
  io::ManifestWriter& manifest_;
  int rank_;
  std::string name_;  ///< the open shard's, "000001234.tar"
  std::unique_ptr<io::AtomicFileWriter> file_;
  std::unique_ptr<io::TarWriter> tar_;
  std::vector<nlohmann::json> records_;  ///< the open shard's, appended to the manifest when it is published
  double started_at_ = 0;
  bool with_index_ = false;  ///< parquet support loads (io/parquet.h): else the shards get no index
};

}  // namespace dpinfer::worker

#pragma once
// The parquet indexes of a --layout webdataset run (worker/shard_writer.h): OUT/<key>.parquet
// beside each OUT/<key>.tar, one row per item in the tar, in its order, and OUT/index.parquet over
// every shard (io/manifest.h's write_merged). img2dataset's columns where they apply, then every
// other field of the items' records (docs/outputs-and-resume.md, Parquet indexes).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/io/manifest.h"
#include "dpinfer/io/parquet.h"

namespace dpinfer::io {

/// The file name of the dataset-level index in OUT.
constexpr const char* kDatasetIndexName = "index.parquet";

/// The index of `records` (objects; ok records of a shard's items, or of every shard's), one row
/// each in their order. First img2dataset's columns: key, caption (the record's prompt), status
/// ("success" for an ok record, else "failed_to_generate"), error_message (the record's error, or
/// null), width, height; then each other field of the records, in name order, typed by its values:
/// int64, double, bool or string, and a string of JSON text for a field whose values are arrays,
/// objects or of mixed types. A field a record lacks is null in its row.
ParquetTable index_table(const std::vector<nlohmann::json>& records);

/// encode_parquet(index_table(records)).
std::string encode_index(const std::vector<nlohmann::json>& records);

/// The indexes of a --layout webdataset run in `dir`, from `set`'s done records that have a "key"
/// (none: nothing is done): each published shard's own index that is missing (from the records the
/// tar's .json members hold, in its order), and `dir/index.parquet` over every shard, by index, from
/// `set`; both atomically. Notes what it did in `result` (write_merged's); without parquet support, why not.
void write_indexes(const std::string& dir, const ManifestSet& set, MergeResult& result);

}  // namespace dpinfer::io

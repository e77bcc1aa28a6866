#include "dpinfer/worker/shard_writer.h"

#include <filesystem>

#include "dpinfer/io/parquet.h"
#include "dpinfer/io/shard_index.h"
#include "dpinfer/util/clock.h"
#include "dpinfer/util/log.h"

namespace dpinfer::worker {

ShardWriter::ShardWriter(std::string out_dir, int64_t shard_size, io::ManifestWriter& manifest, int rank)
    : out_dir_(std::move(out_dir)), shard_size_(shard_size), manifest_(manifest), rank_(rank) {
  std::string why;
  with_index_ = io::parquet_support(&why);
  if (!with_index_ && rank_ == 0)
    log::warn("--layout webdataset: the shards get no parquet index: {}", why);
}

void ShardWriter::add(nlohmann::json record, const std::string& image_name, const std::string& image,
                      const std::string& prompt) {
  const std::string key = image_name.substr(0, image_name.rfind('.'));
  if (!tar_) {
    name_ = key + ".tar";
    file_ = std::make_unique<io::AtomicFileWriter>((std::filesystem::path(out_dir_) / name_).string());
    tar_ = std::make_unique<io::TarWriter>(*file_);
    started_at_ = wall_seconds();
  }
  record["key"] = key;
  record["file_name"] = name_;
  const auto now = static_cast<int64_t>(wall_seconds());
  tar_->add(image_name, image, now);
  tar_->add(key + ".txt", prompt, now);
  tar_->add(key + ".json", record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), now);
  records_.push_back(std::move(record));
  if (static_cast<int64_t>(records_.size()) >= shard_size_) commit();
}

void ShardWriter::commit() {
  if (!tar_) return;
  const std::string stem = name_.substr(0, name_.size() - 4);
  const auto path = [&](const std::string& name) { return (std::filesystem::path(out_dir_) / name).string(); };
  tar_->finish();
  file_->sync();
  // The index, durable beside the tar before either is published: its rows are the records that
  // the tar's .json members hold.
  std::unique_ptr<io::AtomicFileWriter> index;
  if (with_index_) {
    index = std::make_unique<io::AtomicFileWriter>(path(stem + ".parquet"));
    index->write(io::encode_index(records_));
    index->sync();
  }
  for (const nlohmann::json& r : records_) manifest_.append(r);
  // An index of this name from an earlier run (a shard made again after --overwrite) goes before
  // the new tar is published, so that no index ever stands beside a tar it does not describe. A
  // stop between the two renames leaves the tar without its index, which the end-of-run merge
  // (or dpinfer merge) writes from the records.
  if (with_index_) io::remove_file_durably(path(stem + ".parquet"));
  file_->publish();
  if (index) index->publish();
  const nlohmann::json stats = {{"shard", name_},           {"count", records_.size()},
                                {"successes", records_.size()}, {"failed_to_generate", 0},
                                {"rank", rank_},            {"start_time", started_at_},
                                {"end_time", wall_seconds()}};
  io::write_file_atomically(path(stem + "_stats.json"), stats.dump(1) + "\n");
  records_.clear();
  tar_.reset();
  file_.reset();
}

}  // namespace dpinfer::worker

#include "dpinfer/worker/shard_writer.h"

#include <filesystem>

#include "dpinfer/util/clock.h"

namespace dpinfer::worker {

ShardWriter::ShardWriter(std::string out_dir, int64_t shard_size, io::ManifestWriter& manifest, int rank)
    : out_dir_(std::move(out_dir)), shard_size_(shard_size), manifest_(manifest), rank_(rank) {}

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
  tar_->finish();
  file_->sync();
  for (const nlohmann::json& r : records_) manifest_.append(r);
  file_->publish();
  const nlohmann::json stats = {{"shard", name_},           {"count", records_.size()},
                                {"successes", records_.size()}, {"failed_to_generate", 0},
                                {"rank", rank_},            {"start_time", started_at_},
                                {"end_time", wall_seconds()}};
  const std::string stem = name_.substr(0, name_.size() - 4);
  io::write_file_atomically((std::filesystem::path(out_dir_) / (stem + "_stats.json")).string(), stats.dump(1) + "\n");
  records_.clear();
  tar_.reset();
  file_.reset();
}

}  // namespace dpinfer::worker

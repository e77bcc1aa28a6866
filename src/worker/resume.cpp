#include "dpinfer/worker/resume.h"

#include <sys/stat.h>

#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::worker {

bool Resume::already_made(const plan::Item& item, const nlohmann::json& now,
                          const std::vector<std::pair<std::string, nlohmann::json>>& identity, int rank) {
  const std::string file_name = plan::item_file_name(item.index, format_);
  if (!image_exists(file_name)) {
    // Made in the other format? Only a record naming that file says so: the manifests (read once),
    // not a second stat() per item of a run that made none.
    const plan::ImageFormat other =
        format_ == plan::ImageFormat::kPng ? plan::ImageFormat::kJpeg : plan::ImageFormat::kPng;
    const std::string other_name = plan::item_file_name(item.index, other);
    auto found = earlier().items.find(item.index);
    if (found != earlier().items.end() && found->second.state == io::ItemState::kDone &&
        found->second.record.value("file_name", "") == other_name && image_exists(other_name))
      throw InputError("--out " + printable(out_dir_) + " already holds item " + std::to_string(item.index) + " as " +
                       other_name + " (" + printable(found->second.manifest) + "), but this run writes " + file_name +
                       " (--image-format " + plan::to_string(format_) + "); give --image-format " +
                       plan::to_string(other) + " to resume it, another --out, or --overwrite to replace the images");
    return false;
  }
  auto found = earlier().items.find(item.index);
  if (found == earlier().items.end() || found->second.state != io::ItemState::kDone) {
    log::info("rank {}: {} exists but no manifest records it as made (a run stopped between the two); making it "
              "again",
              rank, file_name);
    return false;
  }
  const nlohmann::json& before = found->second.record;
  for (const auto& [field, fallback] : identity) {
    const nlohmann::json was = before.value(field, fallback);
    if (was == now[field]) continue;
    throw InputError("--out " + printable(out_dir_) + " already holds item " + std::to_string(item.index) + " (" +
                     file_name + ") made with " + field + " " + io::json_brief(was, 80) + " (" +
                     printable(found->second.manifest) + "), but this run makes it with " + field + " " +
                     io::json_brief(now[field], 80) +
                     "; use another --out, or --overwrite to replace the earlier images");
  }
  return true;
}

bool Resume::image_exists(const std::string& file_name) const {
  struct stat st;
  const std::string path = out_dir_ + "/" + file_name;
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

const io::ManifestSet& Resume::earlier() {
  if (!earlier_) earlier_ = io::read_manifests(out_dir_);
  return *earlier_;
}

}  // namespace dpinfer::worker

#include "dpinfer/worker/resume.h"

#include <sys/stat.h>

#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::worker {

bool Resume::already_made(const plan::Item& item, const nlohmann::json& now,
                          const std::vector<std::pair<std::string, nlohmann::json>>& identity, int rank) {
  if (!png_exists(item)) return false;
  if (!earlier_) earlier_ = io::read_manifests(out_dir_);
  auto found = earlier_->items.find(item.index);
  if (found == earlier_->items.end() || found->second.state != io::ItemState::kDone) {
    log::info("rank {}: {} exists but no manifest records it as made (a run stopped between the two); making it "
              "again",
              rank, plan::item_file_name(item.index));
    return false;
  }
  const nlohmann::json& before = found->second.record;
  for (const auto& [field, fallback] : identity) {
    const nlohmann::json was = before.value(field, fallback);
    if (was == now[field]) continue;
    throw InputError("--out " + printable(out_dir_) + " already holds item " + std::to_string(item.index) + " (" +
                     plan::item_file_name(item.index) + ") made with " + field + " " + io::json_brief(was, 80) + " (" +
                     printable(found->second.manifest) + "), but this run makes it with " + field + " " +
                     io::json_brief(now[field], 80) +
                     "; use another --out, or --overwrite to replace the earlier images");
  }
  return true;
}

bool Resume::png_exists(const plan::Item& item) const {
  struct stat st;
  const std::string path = out_dir_ + "/" + plan::item_file_name(item.index);
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

}  // namespace dpinfer::worker

#include "dpinfer/worker/resume.h"

#include <sys/stat.h>

#include <algorithm>
#include <optional>

#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::worker {
namespace {

/// The --files-per-dir values N >= 1 with which plan::item_file_name() puts item `index` in
/// directory number `dir` (dir = index / N): [index / (dir + 1) + 1, index / dir], or
/// [index + 1, the largest] for dir 0. Empty (lo > hi) when no N does.
struct FilesPerDirRange {
  int64_t lo = 1, hi = plan::kMaxFilesPerDir;
  bool empty() const { return lo > hi; }
};

FilesPerDirRange files_per_dir_range(int64_t index, int64_t dir) {
  if (dir == 0) return {index + 1, plan::kMaxFilesPerDir};
  if (dir > index) return {1, 0};
  return {index / (dir + 1) + 1, std::min(index / dir, plan::kMaxFilesPerDir)};
}

/// The directory number of a record's "file_name" "DDDDD/IIIIII.ext", or nullopt for a flat name
/// (or one dpinfer did not make).
std::optional<int64_t> dir_number(const std::string& file_name) {
  const size_t slash = file_name.find('/');
  if (slash == std::string::npos || slash > 18 || !plan::is_item_dir_name(file_name.substr(0, slash)))
    return std::nullopt;
  return std::stoll(file_name.substr(0, slash));
}

/// `file_name` without its extension: what --files-per-dir decides.
std::string stem_path(const std::string& file_name) { return file_name.substr(0, file_name.rfind('.')); }

}  // namespace

bool Resume::already_made(const plan::Item& item, const std::function<nlohmann::json()>& now_record,
                          const std::vector<std::pair<std::string, nlohmann::json>>& identity, int rank) {
  auto found = earlier().items.find(item.index);
  const bool recorded = found != earlier().items.end() && found->second.state == io::ItemState::kDone;
  // The file that says it is made: its image, or the shard its record names (output_sink.h).
  const std::string file_name = sink_.made_file(item, recorded ? &found->second.record : nullptr);
  // Made under another layout (the other --image-format, another --files-per-dir)? Only a record
  // naming that file says so: the manifests (read once), not a stat() per layout of every item.
  if (recorded) {
    const std::string recorded_name = recorded_file_name(found->second.record);
    if (recorded_name != file_name && image_exists(recorded_name))
      throw made_in_another_layout(item, found->second, recorded_name, file_name);
  }
  if (!image_exists(file_name)) return false;
  if (!recorded) {
    log::info("rank {}: {} exists but no manifest records it as made (a run stopped between the two); making it "
              "again",
              rank, file_name);
    return false;
  }
  const nlohmann::json& before = found->second.record;
  const nlohmann::json now = now_record();
  for (const auto& [field, fallback] : identity) {
    const nlohmann::json was = before.value(field, fallback);
    const nlohmann::json is = now.value(field, fallback);
    if (was == is) continue;
    throw InputError("--out " + printable(out_dir_) + " already holds item " + std::to_string(item.index) + " (" +
                     file_name + ") made with " + field + " " + io::json_brief(was, 80) + " (" +
                     printable(found->second.manifest) + "), but this run makes it with " + field + " " +
                     io::json_brief(is, 80) +
                     "; use another --out, or --overwrite to replace the earlier images");
  }
  return true;
}

InputError Resume::made_in_another_layout(const plan::Item& item, const io::ManifestEntry& entry,
                                          const std::string& recorded, const std::string& file_name) {
  // The options that differ, as this run has them and as they would make `recorded`.
  std::string ours, theirs;
  const auto add = [](std::string& to, const std::string& option) { to += (to.empty() ? "" : " ") + option; };
  const plan::ImageFormat recorded_format = plan::image_format_of_file_name(recorded).value_or(plan::ImageFormat::kPng);
  if (recorded_format != format_) {
    add(ours, "--image-format " + plan::to_string(format_));
    add(theirs, "--image-format " + plan::to_string(recorded_format));
  }
  const plan::Layout recorded_layout = plan::layout_of_file_name(recorded);
  if (recorded_layout != layout_.layout) {
    add(ours, "--layout " + plan::to_string(layout_.layout));
    add(theirs, "--layout " + plan::to_string(recorded_layout));
  } else if (recorded_layout == plan::Layout::kFlat && stem_path(recorded) != stem_path(file_name)) {
    add(ours, "--files-per-dir " + std::to_string(files_per_dir_));
    const std::optional<int64_t> dir = dir_number(recorded);
    if (!dir) {
      add(theirs, "--files-per-dir 0");
    } else {
      // The N of the run that made it, as far as its records tell: every N that puts each
      // recorded item in its directory (one N once an item on each side of a boundary is made).
      FilesPerDirRange range = files_per_dir_range(item.index, *dir);
      for (const auto& [index, other] : earlier().items) {
        if (other.state != io::ItemState::kDone) continue;
        const std::optional<int64_t> d = dir_number(recorded_file_name(other.record));
        if (!d) continue;
        const FilesPerDirRange r = files_per_dir_range(index, *d);
        const FilesPerDirRange both{std::max(range.lo, r.lo), std::min(range.hi, r.hi)};
        if (!both.empty()) range = both;  // a record that fits no common N is another run's: not this one's
      }
      if (range.lo == range.hi)
        add(theirs, "--files-per-dir " + std::to_string(range.lo));
      else if (range.empty())
        add(theirs, "the --files-per-dir it was made with");
      else
        add(theirs, "the --files-per-dir it was made with (its records fit " + std::to_string(range.lo) +
                        (range.hi == plan::kMaxFilesPerDir ? " or more" : " to " + std::to_string(range.hi)) + ")");
    }
  }
  if (theirs.empty()) theirs = "the options it was made with";  // a name dpinfer does not make (an edited record)
  return InputError("--out " + printable(out_dir_) + " already holds item " + std::to_string(item.index) + " as " +
                    printable(recorded) + " (" + printable(entry.manifest) + "), but this run writes " + file_name +
                    (ours.empty() ? "" : " (" + ours + ")") + "; give " + theirs +
                    " to resume it, another --out, or --overwrite to make the images again (the earlier files stay)");
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

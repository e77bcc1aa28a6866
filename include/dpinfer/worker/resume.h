#pragma once
// Resume: which items an earlier run in the same --out made already.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/io/manifest.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/util/error.h"
#include "dpinfer/worker/output_sink.h"

namespace dpinfer::worker {

class Resume {
 public:
  /// Resumes in `out_dir`, where this run writes images in `layout` (plan::item_file_name) through
  /// `sink`, which says which file means an item is made (OutputSink::made_file).
  Resume(std::string out_dir, const plan::OutputLayout& layout, const OutputSink& sink)
      : out_dir_(std::move(out_dir)),
        layout_(layout),
        format_(layout.format),
        files_per_dir_(layout.files_per_dir),
        sink_(sink) {}

  /// Whether an earlier run made `item`, i.e. its image exists and the manifests' latest
  /// record of it says ok. A PNG without such a record (a run killed between the rename
  /// and the manifest line) is made again, so that metadata.jsonl gets its row. A record
  /// that says the item was something else than `now_record()` (this run's record of it, built only
  /// when an earlier record is there to compare with: another
  /// prompts file, or another seed, steps, size, guidance, scheduler or setting) throws
  /// InputError: the two runs would mix silently in one directory. The manifests are read
  /// once, at the first item (a fresh run's --out has none to read); then each item costs one
  /// stat(). An item made under another layout (the latest record names another file, and
  /// that file exists: the other --image-format, or another --files-per-dir) throws InputError
  /// too, naming the options that resume it: the directory would hold both, and
  /// metadata.jsonl one of them.
  /// `identity` lists the fields compared, each with the value a record lacking it stands
  /// for (identity_fields()).
  bool already_made(const plan::Item& item, const std::function<nlohmann::json()>& now_record,
                    const std::vector<std::pair<std::string, nlohmann::json>>& identity, int rank);

 private:
  bool image_exists(const std::string& file_name) const;
  const io::ManifestSet& earlier();

  /// The InputError for `item`, which `entry` records as made in `recorded`, while this run
  /// writes it as `file_name`.
  InputError made_in_another_layout(const plan::Item& item, const io::ManifestEntry& entry, const std::string& recorded,
                                    const std::string& file_name);

  std::string out_dir_;
  plan::OutputLayout layout_;
  plan::ImageFormat format_;
  int64_t files_per_dir_;
  const OutputSink& sink_;
  std::optional<io::ManifestSet> earlier_;  ///< the output directory's manifests, read at the first item
};

}  // namespace dpinfer::worker

#pragma once
// Resume: which items an earlier run in the same --out made already.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/io/manifest.h"
#include "dpinfer/plan/items.h"

namespace dpinfer::worker {

class Resume {
 public:
  explicit Resume(std::string out_dir) : out_dir_(std::move(out_dir)) {}

  /// Whether an earlier run made `item`, i.e. its PNG exists and the manifests' latest
  /// record of it says ok. A PNG without such a record (a run killed between the rename
  /// and the manifest line) is made again, so that metadata.jsonl gets its row. A record
  /// that says the item was something else than `now` (this run's record of it: another
  /// prompts file, or another seed, steps, size, guidance, scheduler or setting) throws
  /// InputError: the two runs would mix silently in one directory. The manifests are read
  /// once, when the first PNG turns up, so a fresh run pays nothing.
  /// `identity` lists the fields compared, each with the value a record lacking it stands
  /// for (identity_fields()).
  bool already_made(const plan::Item& item, const nlohmann::json& now,
                    const std::vector<std::pair<std::string, nlohmann::json>>& identity, int rank);

 private:
  bool png_exists(const plan::Item& item) const;

  std::string out_dir_;
  std::optional<io::ManifestSet> earlier_;  ///< the output directory's manifests, once a PNG is found
};

}  // namespace dpinfer::worker

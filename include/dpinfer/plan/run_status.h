#pragma once
// How far a run is, from its prompts file and the manifests in its output
// directory alone (`dpinfer status`): no GPU, no store, no worker. The item list is
// the worker's own (ItemList), the shards the worker's own (BatchPlan::shard_items),
// and an item's state the merge's own (io::read_manifests).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/io/manifest.h"
#include "dpinfer/plan/batches.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/plan/sharding.h"

namespace dpinfer::plan {

/// One outer shard (sharded runs) or one rank's manifest (unsharded runs).
struct StatusGroup {
  std::optional<OuterShard> shard;  ///< set: an outer shard; unset: rank `rank` of an unsharded run
  int rank = -1;
  int64_t total = -1;               ///< the shard's items; -1 for a rank (its share depends on the mode)
  int64_t done = 0, failed = 0;
  std::vector<std::string> manifests;  ///< the manifests found for it
};

struct RunStatus {
  int64_t total = 0;    ///< items in scope: the whole file, or the --shard
  int64_t done = 0;     ///< latest record ok and PNG present
  int64_t failed = 0;   ///< latest record an error
  int64_t missing() const { return total - done - failed; }  ///< never recorded, or PNG gone
  bool complete() const { return done == total; }
  std::vector<StatusGroup> groups;  ///< shards by (count, index), then ranks
  size_t manifests = 0, torn_lines = 0, duplicates = 0;
  std::vector<io::ManifestConflict> conflicts;
  /// Records that do not belong to this prompts file (index past its end, or another
  /// prompt at that index): the first few, as one-line messages.
  std::vector<std::string> foreign_records;

  nlohmann::json to_json() const;
  /// "shard 0/3: 34/34 done, 0 failed" for each group, then the overall line.
  std::vector<std::string> lines() const;
};

/// The status of `items` (all of the prompts file), cut into `batches` as the run cut them
/// (a shard is a run of whole batches), given the manifests `set`. `only` restricts the
/// totals and the groups to one outer shard. Every shard count that appears in a manifest
/// name gets all its shards listed, started or not.
RunStatus run_status(const ItemList& items, const BatchPlan& batches, const io::ManifestSet& set,
                     const std::optional<OuterShard>& only = std::nullopt);

}  // namespace dpinfer::plan

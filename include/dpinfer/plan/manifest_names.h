#pragma once
// The names of the per-rank manifests in an output directory (README, "Outputs"):
// manifest.rank<R>.jsonl, or manifest.shard<I>-of-<N>.rank<R>.jsonl in a sharded
// run (--shard I/N or a job array task). The worker writes them; `dpinfer status`
// reads the shard and rank back from them.

#include <optional>
#include <string>

#include "dpinfer/plan/sharding.h"

namespace dpinfer::plan {

/// The manifest of rank `rank`; `shard` only when the run is sharded.
std::string manifest_file_name(const std::optional<OuterShard>& shard, int rank);

struct ManifestName {
  std::optional<OuterShard> shard;  ///< none: an unsharded run
  int rank = 0;
};

/// The shard and rank of a manifest_file_name(); nullopt for any other name.
std::optional<ManifestName> parse_manifest_file_name(const std::string& name);

}  // namespace dpinfer::plan

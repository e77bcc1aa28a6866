#include "dpinfer/plan/manifest_names.h"

#include <cstdio>

namespace dpinfer::plan {

std::string manifest_file_name(const std::optional<OuterShard>& shard, int rank) {
  if (!shard) return "manifest.rank" + std::to_string(rank) + ".jsonl";
  return "manifest.shard" + std::to_string(shard->index) + "-of-" + std::to_string(shard->count) + ".rank" +
         std::to_string(rank) + ".jsonl";
}

std::optional<ManifestName> parse_manifest_file_name(const std::string& name) {
  int i = 0, n = 0, r = 0, used = 0;
  ManifestName m;
  // %n checks that the whole name matched; the canonical form is checked by
  // printing it back (no leading zeros, no signs, no spaces).
  if (std::sscanf(name.c_str(), "manifest.shard%d-of-%d.rank%d.jsonl%n", &i, &n, &r, &used) == 3 &&
      used == static_cast<int>(name.size()) && n >= 1 && i >= 0 && i < n && r >= 0) {
    m.shard = OuterShard{i, n};
    m.rank = r;
  } else if (std::sscanf(name.c_str(), "manifest.rank%d.jsonl%n", &r, &used) == 1 &&
             used == static_cast<int>(name.size()) && r >= 0) {
    m.rank = r;
  } else {
    return std::nullopt;
  }
  if (manifest_file_name(m.shard, m.rank) != name) return std::nullopt;
  return m;
}

}  // namespace dpinfer::plan

#include "dpinfer/plan/run_status.h"

#include <map>
#include <tuple>

#include "dpinfer/io/json_file.h"
#include "dpinfer/plan/manifest_names.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {
namespace {

constexpr size_t kMaxForeignRecords = 3;

std::string shard_text(const OuterShard& s) { return std::to_string(s.index) + "/" + std::to_string(s.count); }

}  // namespace

RunStatus run_status(const ItemList& items, const BatchPlan& batches, const io::ManifestSet& set,
                     const std::optional<OuterShard>& only) {
  RunStatus st;
  st.manifests = set.manifests.size();
  st.torn_lines = set.torn_lines;
  st.duplicates = set.duplicates;
  st.conflicts = set.conflicts;
  const int64_t n = items.size();

  // Done and failed counts over [begin, end), from the items' latest records.
  auto count = [&](int64_t begin, int64_t end, int64_t& done, int64_t& failed) {
    for (auto it = set.items.lower_bound(begin); it != set.items.end() && it->first < end; ++it) {
      if (it->second.state == io::ItemState::kDone) ++done;
      else if (it->second.state == io::ItemState::kFailed) ++failed;
    }
  };
  int64_t begin = 0, end = n;
  if (only) {
    const ItemSpan span = batches.shard_items(*only);
    std::tie(begin, end) = std::make_pair(span.first, span.end());
  }
  st.total = end - begin;
  count(begin, end, st.done, st.failed);

  // Shards by (count, index), each with the manifests found for it; ranks of
  // unsharded runs with the items whose latest record is in their manifest.
  std::map<std::pair<int, int>, StatusGroup> shards;
  std::map<int, StatusGroup> ranks;
  for (const std::string& m : set.manifests) {
    auto name = parse_manifest_file_name(m);
    if (!name) continue;
    if (name->shard) {
      for (int i = 0; i < name->shard->count; ++i) {
        OuterShard s{i, name->shard->count};
        if (only && (s.index != only->index || s.count != only->count)) continue;
        auto [g, added] = shards.try_emplace({s.count, s.index});
        if (added) {
          g->second.shard = s;
          const ItemSpan span = batches.shard_items(s);
          g->second.total = span.size;
          count(span.first, span.end(), g->second.done, g->second.failed);
        }
        if (i == name->shard->index) g->second.manifests.push_back(m);
      }
    } else if (!only) {
      StatusGroup& g = ranks[name->rank];
      g.rank = name->rank;
      g.manifests.push_back(m);
    }
  }
  for (const auto& [index, entry] : set.items) {
    auto name = parse_manifest_file_name(entry.manifest);
    auto r = name && !name->shard ? ranks.find(name->rank) : ranks.end();
    if (r == ranks.end()) continue;
    if (entry.state == io::ItemState::kDone) ++r->second.done;
    else if (entry.state == io::ItemState::kFailed) ++r->second.failed;
  }
  for (auto& [key, g] : shards) st.groups.push_back(std::move(g));
  for (auto& [rank, g] : ranks) st.groups.push_back(std::move(g));

  // Records that this prompts file cannot have written.
  for (const auto& [index, entry] : set.items) {
    if (st.foreign_records.size() >= kMaxForeignRecords) break;
    const std::string manifest = printable(entry.manifest);
    if (index < 0 || index >= n) {
      st.foreign_records.push_back(manifest + " records item " + std::to_string(index) +
                                   " but the prompts file gives only " + std::to_string(n) + " item(s)");
      continue;
    }
    const nlohmann::json& rec = entry.record;
    if (rec.contains("prompt") && rec["prompt"].is_string() &&
        rec["prompt"].get_ref<const std::string&>() != items.prompt_of(index)) {
      const Item item = items.at(index);
      st.foreign_records.push_back(manifest + " records item " + std::to_string(index) + " with prompt " +
                                   io::json_brief(rec["prompt"], 80) + " but the prompts file's line " +
                                   std::to_string(item.line) + " gives " + io::json_brief(item.prompt, 80));
    }
  }
  return st;
}

nlohmann::json RunStatus::to_json() const {
  nlohmann::json shards = nlohmann::json::array(), rank_list = nlohmann::json::array();
  for (const StatusGroup& g : groups) {
    if (g.shard) {
      shards.push_back({{"shard", shard_text(*g.shard)}, {"index", g.shard->index}, {"count", g.shard->count},
                        {"total", g.total}, {"done", g.done}, {"failed", g.failed},
                        {"missing", g.total - g.done - g.failed}, {"manifests", g.manifests}});
    } else {
      rank_list.push_back({{"rank", g.rank}, {"done", g.done}, {"failed", g.failed}, {"manifests", g.manifests}});
    }
  }
  nlohmann::json conflict_list = nlohmann::json::array();
  for (const auto& c : conflicts) conflict_list.push_back(c.describe());
  return {{"total", total},           {"done", done},
          {"failed", failed},         {"missing", missing()},
          {"complete", complete()},   {"shards", shards},
          {"ranks", rank_list},       {"manifests", manifests},
          {"torn_lines", torn_lines}, {"duplicates", duplicates},
          {"conflicts", conflict_list}};
}

std::vector<std::string> RunStatus::lines() const {
  std::vector<std::string> out;
  for (const StatusGroup& g : groups) {
    if (g.shard) {
      std::string line = "shard " + shard_text(*g.shard) + ": " + std::to_string(g.done) + "/" +
                         std::to_string(g.total) + " done, " + std::to_string(g.failed) + " failed";
      if (g.manifests.empty()) line += " (not started: no manifest)";
      out.push_back(line);
    } else {
      out.push_back("rank " + std::to_string(g.rank) + ": " + std::to_string(g.done) + " done, " +
                    std::to_string(g.failed) + " failed");
    }
  }
  out.push_back("total: " + std::to_string(done) + "/" + std::to_string(total) + " done, " + std::to_string(failed) +
                " failed, " + std::to_string(missing()) + " missing");
  return out;
}

}  // namespace dpinfer::plan

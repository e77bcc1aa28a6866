#include "dpinfer/plan/progress_report.h"

#include <nlohmann/json.hpp>

namespace dpinfer::plan {
namespace {

nlohmann::json counts_json(const ProgressCounts& c) {
  return {{"done", c.done}, {"skipped", c.skipped}, {"failed", c.failed}};
}

std::optional<int64_t> get_int(const nlohmann::json& j, const char* key, int64_t min) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  int64_t v = it->get<int64_t>();
  if (v < min) return std::nullopt;
  return v;
}

std::optional<ProgressCounts> get_counts(const nlohmann::json& j) {
  auto done = get_int(j, "done", 0), skipped = get_int(j, "skipped", 0), failed = get_int(j, "failed", 0);
  if (!done || !skipped || !failed) return std::nullopt;
  return ProgressCounts{*done, *skipped, *failed};
}

}  // namespace

std::string format_progress_report(const ProgressReport& r) {
  nlohmann::json j = counts_json(r.counts);
  j["rank"] = r.rank;
  j["world"] = r.world;
  j["todo"] = r.todo;
  j["total"] = r.total;
  if (r.group) j["group"] = counts_json(*r.group);
  return j.dump();
}

std::optional<ProgressReport> parse_progress_report(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (!j.is_object()) return std::nullopt;
  ProgressReport r;
  auto rank = get_int(j, "rank", 0), world = get_int(j, "world", 1);
  auto todo = get_int(j, "todo", -1), total = get_int(j, "total", -1);
  auto counts = get_counts(j);
  if (!rank || !world || !todo || !total || !counts || *rank >= *world || *world > (1 << 24)) return std::nullopt;
  r.rank = static_cast<int>(*rank);
  r.world = static_cast<int>(*world);
  r.todo = *todo;
  r.total = *total;
  r.counts = *counts;
  if (auto g = j.find("group"); g != j.end()) {
    if (!g->is_object()) return std::nullopt;
    r.group = get_counts(*g);
    if (!r.group) return std::nullopt;
  }
  return r;
}

}  // namespace dpinfer::plan

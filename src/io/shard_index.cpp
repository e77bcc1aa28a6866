#include "dpinfer/io/shard_index.h"

#include <filesystem>
#include <limits>
#include <map>

#include "dpinfer/io/atomic_file.h"

namespace dpinfer::io {
namespace {

using nlohmann::json;
using Type = ParquetColumn::Type;

/// img2dataset's columns (its parquet writer's schema), where dpinfer has them.
const char* const kHead[] = {"key", "caption", "status", "error_message", "width", "height"};

/// A record's value under an index column.
const json* value_of(const json& record, const std::string& column, json& scratch) {
  const auto at = [&](const char* k) -> const json* {
    const auto it = record.find(k);
    return it == record.end() || it->is_null() ? nullptr : &*it;
  };
  if (column == "caption") return at("prompt");
  if (column == "status") {
    const json* s = at("status");
    scratch = s && *s == "ok" ? "success" : "failed_to_generate";
    return &scratch;
  }
  if (column == "error_message") return at("error");
  return at(column.c_str());
}

bool fits_int64(const json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

Type type_of(const std::vector<nlohmann::json>& records, const std::string& column) {
  bool any = false, all_int = true, all_number = true, all_bool = true, all_string = true;
  json scratch;
  for (const json& r : records) {
    const json* v = value_of(r, column, scratch);
    if (!v) continue;
    any = true;
    all_int = all_int && fits_int64(*v);
    all_number = all_number && v->is_number();
    all_bool = all_bool && v->is_boolean();
    all_string = all_string && v->is_string();
  }
  if (!any || all_string) return Type::kString;
  if (all_int) return Type::kInt64;
  if (all_number) return Type::kDouble;
  if (all_bool) return Type::kBool;
  return Type::kJson;
}

}  // namespace

ParquetTable index_table(const std::vector<nlohmann::json>& records) {
  std::vector<std::string> names(std::begin(kHead), std::end(kHead));
  std::map<std::string, bool> rest;  // in name order
  for (const json& r : records)
    for (auto it = r.begin(); it != r.end(); ++it) rest.emplace(it.key(), true);
  for (const auto& [k, unused] : rest) {
    (void)unused;
    bool head = k == "prompt" || k == "status" || k == "error";
    for (const char* h : kHead) head = head || k == h;
    if (!head) names.push_back(k);
  }
  ParquetTable t;
  t.rows = static_cast<int64_t>(records.size());
  json scratch;
  for (const std::string& name : names) {
    ParquetColumn c;
    c.name = name;
    c.type = type_of(records, name);
    c.valid.reserve(records.size());
    for (const json& r : records) {
      const json* v = value_of(r, name, scratch);
      c.valid.push_back(v ? 1 : 0);
      switch (c.type) {
        case Type::kString: c.strings.push_back(v ? v->get<std::string>() : std::string()); break;
        case Type::kInt64: c.ints.push_back(v ? v->get<int64_t>() : 0); break;
        case Type::kBool: c.ints.push_back(v && v->get<bool>() ? 1 : 0); break;
        case Type::kDouble: c.doubles.push_back(v ? v->get<double>() : 0.0); break;
        default:
          c.strings.push_back(v ? v->dump(-1, ' ', false, json::error_handler_t::replace) : std::string());
          break;
      }
    }
    t.columns.push_back(std::move(c));
  }
  return t;
}

std::string encode_index(const std::vector<nlohmann::json>& records) { return encode_parquet(index_table(records)); }

void write_indexes(const std::string& dir, const ManifestSet& set, MergeResult& result) {
  namespace fs = std::filesystem;
  std::vector<json> all;                             // by index (set.items is a map by index)
  std::map<std::string, std::vector<json>> shards;  // by tar name
  for (const auto& [index, entry] : set.items) {
    const json& r = entry.record;
    if (entry.state != ItemState::kDone || !r.contains("key") || !r.contains("file_name") ||
        !r["file_name"].is_string())
      continue;
    all.push_back(r);
    shards[r["file_name"].get<std::string>()].push_back(r);
  }
  if (all.empty()) return;
  if (!parquet_support(&result.no_index_why)) return;
  for (const auto& [tar, records] : shards) {
    const std::string stem = tar.size() > 4 ? tar.substr(0, tar.size() - 4) : tar;
    const fs::path index = fs::path(dir) / (stem + ".parquet");
    std::error_code ec;
    if (fs::exists(index, ec)) continue;
    write_file_atomically(index.string(), encode_index(records));
    ++result.shard_indexes_written;
  }
  write_file_atomically((fs::path(dir) / kDatasetIndexName).string(), encode_index(all));
  result.dataset_index = true;
}

}  // namespace dpinfer::io

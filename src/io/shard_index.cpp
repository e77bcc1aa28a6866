#include "dpinfer/io/shard_index.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/tar_writer.h"

namespace dpinfer::io {
namespace {

using nlohmann::json;
using Type = ParquetColumn::Type;

/// img2dataset's columns (its parquet writer's schema), where dpinfer has them, and the record keys
/// that fill them ("status" is mapped: see index_table).
const char* const kHead[] = {"key", "caption", "status", "error_message", "width", "height"};
const char* const kHeadSource[] = {"key", "prompt", "status", "error", "width", "height"};
constexpr size_t kStatusColumn = 2;

bool fits_int64(const json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

struct Kinds {
  bool any = false, all_int = true, all_number = true, all_bool = true, all_string = true;
  void see(const json& v) {
    any = true;
    all_int = all_int && fits_int64(v);
    all_number = all_number && v.is_number();
    all_bool = all_bool && v.is_boolean();
    all_string = all_string && v.is_string();
  }
  Type type() const {
    if (!any || all_string) return Type::kString;
    if (all_int) return Type::kInt64;
    if (all_number) return Type::kDouble;
    if (all_bool) return Type::kBool;
    return Type::kJson;
  }
};

/// Each record's fields, once: the columns (head first, then the other keys in name order), each
/// typed by its values, then filled. One hash lookup per field, and no copy of a record.
ParquetTable table_of(const std::vector<const json*>& records) {
  std::unordered_map<std::string, size_t> column_of;  // record key -> column
  std::vector<std::string> names(std::begin(kHead), std::end(kHead));
  for (size_t c = 0; c < names.size(); ++c) column_of.emplace(kHeadSource[c], c);
  column_of.emplace("caption", SIZE_MAX);  // reserved names: a record of an older version may hold them
  column_of.emplace("error_message", SIZE_MAX);
  std::set<std::string> rest;
  for (const json* r : records)
    for (auto it = r->begin(); it != r->end(); ++it)
      if (!column_of.count(it.key())) rest.insert(it.key());
  for (const std::string& k : rest) {
    column_of.emplace(k, names.size());
    names.push_back(k);
  }
  const size_t rows = records.size();
  std::vector<Kinds> kinds(names.size());
  for (const json* r : records)
    for (auto it = r->begin(); it != r->end(); ++it) {
      const size_t c = column_of.at(it.key());
      if (c != SIZE_MAX && c != kStatusColumn && !it->is_null()) kinds[c].see(*it);
    }
  ParquetTable t;
  t.rows = static_cast<int64_t>(rows);
  t.columns.resize(names.size());
  for (size_t c = 0; c < names.size(); ++c) {
    ParquetColumn& col = t.columns[c];
    col.name = names[c];
    col.type = c == kStatusColumn ? Type::kString : kinds[c].type();
    col.valid.assign(rows, 0);
    if (col.type == Type::kInt64 || col.type == Type::kBool) col.ints.assign(rows, 0);
    else if (col.type == Type::kDouble) col.doubles.assign(rows, 0.0);
    else col.strings.assign(rows, std::string());
  }
  for (size_t i = 0; i < rows; ++i) {
    ParquetColumn& status = t.columns[kStatusColumn];
    status.valid[i] = 1;
    status.strings[i] = "failed_to_generate";
    for (auto it = records[i]->begin(); it != records[i]->end(); ++it) {
      const size_t c = column_of.at(it.key());
      if (c == SIZE_MAX || it->is_null()) continue;
      const json& v = *it;
      ParquetColumn& col = t.columns[c];
      if (c == kStatusColumn) {
        if (v == "ok") status.strings[i] = "success";
        continue;
      }
      col.valid[i] = 1;
      switch (col.type) {
        case Type::kString: col.strings[i] = v.get<std::string>(); break;
        case Type::kInt64: col.ints[i] = v.get<int64_t>(); break;
        case Type::kBool: col.ints[i] = v.get<bool>() ? 1 : 0; break;
        case Type::kDouble: col.doubles[i] = v.get<double>(); break;
        default: col.strings[i] = v.dump(-1, ' ', false, json::error_handler_t::replace); break;
      }
    }
  }
  return t;
}

}  // namespace

ParquetTable index_table(const std::vector<nlohmann::json>& records) {
  std::vector<const json*> pointers;
  pointers.reserve(records.size());
  for (const json& r : records) pointers.push_back(&r);
  return table_of(pointers);
}

std::string encode_index(const std::vector<nlohmann::json>& records) { return encode_parquet(index_table(records)); }

namespace {
std::string encode_index(const std::vector<const json*>& records) { return encode_parquet(table_of(records)); }
}  // namespace

void write_indexes(const std::string& dir, const ManifestSet& set, MergeResult& result) {
  namespace fs = std::filesystem;
  std::vector<const json*> all;                             // by index (set.items is a map by index)
  std::map<std::string, std::vector<const json*>> shards;  // by tar name
  for (const auto& [index, entry] : set.items) {
    const json& r = entry.record;
    if (entry.state != ItemState::kDone || !r.contains("key") || !r.contains("file_name") ||
        !r["file_name"].is_string())
      continue;
    all.push_back(&r);
    shards[r["file_name"].get<std::string>()].push_back(&r);
  }
  if (all.empty()) return;
  if (!parquet_support(&result.no_index_why)) return;
  for (const auto& shard : shards) {
    const std::string& tar = shard.first;
    const std::string stem = tar.size() > 4 ? tar.substr(0, tar.size() - 4) : tar;
    const fs::path index = fs::path(dir) / (stem + ".parquet");
    std::error_code ec;
    if (fs::exists(index, ec)) continue;
    // From the tar's own .json members, so that the index describes the tar whatever the manifests
    // say now (an item of it made again into another shard after --overwrite).
    std::vector<json> members;
    for (const auto& [name, bytes] : read_tar_members((fs::path(dir) / tar).string(), ".json"))
      members.push_back(json::parse(bytes, nullptr, /*allow_exceptions=*/false));
    members.erase(std::remove_if(members.begin(), members.end(), [](const json& j) { return !j.is_object(); }),
                  members.end());
    write_file_atomically(index.string(), encode_index(members));
    ++result.shard_indexes_written;
  }
  write_file_atomically((fs::path(dir) / kDatasetIndexName).string(), encode_index(all));
  result.dataset_index = true;
}

}  // namespace dpinfer::io

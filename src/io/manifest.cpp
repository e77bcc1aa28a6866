#include "dpinfer/io/manifest.h"

#include "dpinfer/io/shard_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {

ManifestWriter::ManifestWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw SystemError("cannot open manifest " + quote(path), errno);
  // A writer killed mid-line left a torn last line: end it, or this run's first
  // record would be glued onto it and lost with it.
  char last = '\n';
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  if (size > 0 && ::pread(fd_, &last, 1, size - 1) == 1 && last != '\n') append_raw("\n");
}

ManifestWriter::~ManifestWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ManifestWriter::append(const nlohmann::json& record) {
  append_raw(record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void ManifestWriter::append_raw(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError("cannot append to manifest " + quote(path_), errno);
    done += static_cast<size_t>(n);
  }
}

namespace {

/// What an item is: fields that two records of the same item must agree on. Besides these,
/// every field a record's "settings" list names (its model family's settings, such as
/// clip_skip), and clip_skip and guidance_rescale, which records carried before that list.
constexpr const char* kIdentityFields[] = {"prompt", "negative_prompt", "seed",      "steps",
                                           "guidance_scale", "width",  "height",    "model",
                                           "scheduler",      "clip_skip", "guidance_rescale", "seed_from", "loras",
                                           "scheduler_settings", "vae_tiling", "weight_storage", "dtype",
                                           "attention_backend", "channels_last", "fp8_compute", "input_image_hash", "strength", "input_mask_hash"};

/// A manifest line as JSON, or a discarded value for a torn or foreign line. Depth-limited
/// (json_file.h): a record is copied and compared, which nlohmann does recursively.
/// A record's "status" and "finished_at", or "" and 0 when missing or of another type
/// (nlohmann's value() throws on the wrong type).
std::string status_of(const nlohmann::json& rec) {
  auto it = rec.find("status");
  return it != rec.end() && it->is_string() ? it->get<std::string>() : std::string();
}
double finished_at_of(const nlohmann::json& rec) {
  auto it = rec.find("finished_at");
  return it != rec.end() && it->is_number() ? it->get<double>() : 0.0;
}

/// The deepest nesting of objects and arrays in `text`, counted outside strings; exact for valid
/// JSON, and for invalid JSON only a hint (which the parser then refuses anyway).
int nesting_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_record(const std::string& line) {
  // Most lines are dpinfer's own records, a few levels deep: nlohmann's plain parser, without the
  // per-event callback that parse_json_text's depth limit needs (issue 27: that callback was a
  // quarter of a million-item resume). Same result: a line that fails either way is discarded.
  if (nesting_depth(line) < kMaxJsonDepth - 1) return nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  try {
    return parse_json_text(line, JsonDialect::kStrict);
  } catch (const JsonSyntaxError&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

/// The identity fields of `rec`: kIdentityFields and its own "settings".
std::vector<std::string> identity_fields(const nlohmann::json& rec) {
  std::vector<std::string> fields(std::begin(kIdentityFields), std::end(kIdentityFields));
  auto settings = rec.find("settings");
  if (settings != rec.end() && settings->is_array())
    for (const auto& name : *settings)
      if (name.is_string() && std::find(fields.begin(), fields.end(), name.get<std::string>()) == fields.end())
        fields.push_back(name.get<std::string>());
  return fields;
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

/// Appends dump(record) less its "finished_at" to `out`, without copying the record (issue 27: the
/// copy was a third of a million-row merge): the same bytes, as nlohmann writes an object at indent
/// -1 as {"key":value,...} in key order, a key escaped as a string value is.
void dump_without_finished_at(const nlohmann::json& record, std::string& out) {
  if (!record.is_object()) {
    out += dump(record);
    return;
  }
  out += '{';
  bool first = true;
  for (auto it = record.begin(); it != record.end(); ++it) {
    if (it.key() == "finished_at") continue;
    if (!first) out += ',';
    first = false;
    out += dump(nlohmann::json(it.key()));
    out += ':';
    out += dump(it.value());
  }
  out += '}';
}

/// A record of an older dpinfer in today's names: the image number within its JSONL
/// line was "image", which in metadata.jsonl shadowed Hugging Face imagefolder's own
/// picture column (`datasets.load_dataset("imagefolder")` then loaded no picture).
void upgrade_record(nlohmann::json& rec) {
  auto old = rec.find("image");
  if (old == rec.end()) return;
  if (!rec.contains("image_index")) rec["image_index"] = *old;
  rec.erase("image");
}

}  // namespace

std::string ManifestConflict::describe() const {
  return "item " + std::to_string(index) + " has " + field + " " + first_value + " in " + printable(first_manifest) + " but " +
         second_value + " in " + printable(second_manifest);
}

ManifestSet read_manifests(const std::string& dir) {
  namespace fs = std::filesystem;
  ManifestSet set;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw Error("cannot list " + quote(dir) + ": " + ec.message());
  for (const auto& e : it) {
    std::string name = e.path().filename().string();
    if (name.rfind("manifest", 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0)
      set.manifests.push_back(name);
  }
  std::sort(set.manifests.begin(), set.manifests.end());
  // Per item and manifest: the identity of that manifest's latest record (largest
  // "finished_at", ties to the later line, as for the merge's own choice below). Only
  // these are compared across manifests: a record that its own manifest superseded
  // (e.g. an --overwrite rerun with another --seed) says nothing about what the item
  // is now, and comparing it made `dpinfer merge` refuse runs whose latest records
  // all agree. Per item also: the manifests holding an "ok" record, to count
  // duplicates.
  //
  // Two passes (issue 27: a million-item resume spent most of its read here, copying every
  // record's identity into a tree of maps): the first keeps each item's latest record and which
  // manifests name it; only when some item is in two manifests or more (a rerun with another
  // world size, overlapping shards) does a second pass gather those items' identities. Each rank
  // appends to its own manifest, so most runs need no second pass.
  struct Latest {
    double finished_at = 0;
    nlohmann::json identity;
  };
  struct Seen {
    int first_manifest = -1;  ///< the first manifest (set.manifests' place) that records it
    bool several = false;     ///< recorded in another manifest too
    int ok_manifest = -1;
    bool duplicate = false;
  };
  std::unordered_map<int64_t, Seen> seen;
  const auto for_each_record = [&](const std::function<void(int manifest, nlohmann::json& rec)>& take, bool count_torn) {
    for (size_t m = 0; m < set.manifests.size(); ++m) {
      std::ifstream in(fs::path(dir) / set.manifests[m]);
      for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        nlohmann::json rec = parse_record(line);
        if (!rec.is_object() || !rec.contains("index") || !rec["index"].is_number_integer()) {
          if (count_torn) ++set.torn_lines;
          continue;
        }
        upgrade_record(rec);
        take(static_cast<int>(m), rec);
      }
    }
  };
  bool any_in_several = false;
  for_each_record(
      [&](int m, nlohmann::json& rec) {
        const int64_t index = rec["index"].get<int64_t>();
        const double t = finished_at_of(rec);
        Seen& s = seen[index];
        if (s.first_manifest < 0) s.first_manifest = m;
        else if (s.first_manifest != m) s.several = any_in_several = true;
        if (status_of(rec) == "ok") {
          if (s.ok_manifest < 0) s.ok_manifest = m;
          else if (s.ok_manifest != m && !s.duplicate) s.duplicate = true, ++set.duplicates;
        }
        auto [e, added] = set.items.try_emplace(index);
        if (added || t >= finished_at_of(e->second.record)) {
          e->second.record = std::move(rec);
          e->second.manifest = set.manifests[static_cast<size_t>(m)];
        }
      },
      /*count_torn=*/true);
  // The second pass: the latest identity per manifest of each item in several.
  std::map<int64_t, std::map<std::string, Latest>> latest;  // by index, then manifest (sorted, as reported)
  if (any_in_several) {
    for_each_record(
        [&](int m, nlohmann::json& rec) {
          const int64_t index = rec["index"].get<int64_t>();
          if (!seen[index].several) return;
          const double t = finished_at_of(rec);
          auto [l, first_in_manifest] = latest[index].try_emplace(set.manifests[static_cast<size_t>(m)]);
          if (!first_in_manifest && t < l->second.finished_at) return;
          l->second.finished_at = t;
          l->second.identity = nlohmann::json::object();
          for (const std::string& f : identity_fields(rec))
            if (rec.contains(f)) l->second.identity[f] = rec[f];
          // Records from before LoRAs were recorded were made without any.
          if (!rec.contains("loras")) l->second.identity["loras"] = nlohmann::json::array();
          // Nor scheduler_settings, when the run set none.
          if (!rec.contains("scheduler_settings")) l->second.identity["scheduler_settings"] = nlohmann::json::object();
          // Nor vae_tiling, when the VAE decoded whole.
          if (!rec.contains("vae_tiling")) l->second.identity["vae_tiling"] = false;
          // Nor weight_storage, when the weights were kept in the run dtype (--weight-storage default).
          if (!rec.contains("weight_storage")) l->second.identity["weight_storage"] = "default";
          // Nor attention_backend and channels_last, at their defaults (--attention-backend auto, no --channels-last).
          if (!rec.contains("attention_backend")) l->second.identity["attention_backend"] = "auto";
          if (!rec.contains("channels_last")) l->second.identity["channels_last"] = false;
          // Nor fp8_compute, when the matrix products ran in the run dtype (--fp8-compute off).
          if (!rec.contains("fp8_compute")) l->second.identity["fp8_compute"] = "off";
          if (rec.contains("settings")) l->second.identity["settings"] = rec["settings"];
        },
        /*count_torn=*/false);
  }
  // A conflict: two manifests whose latest records of an item disagree on a field
  // both of them give. Every pair is compared (an item has a handful of manifests at
  // most), so a field that the first manifest lacks is still checked; the first
  // disagreement in manifest order is the one reported.
  for (const auto& [index, by_manifest] : latest) {
    bool found = false;
    for (auto b = by_manifest.begin(); b != by_manifest.end() && !found; ++b) {
      for (auto a = by_manifest.begin(); a != b && !found; ++a) {
        for (const std::string& f : identity_fields(a->second.identity)) {
          const nlohmann::json& x = a->second.identity.contains(f) ? a->second.identity[f] : nlohmann::json();
          const nlohmann::json& y = b->second.identity.contains(f) ? b->second.identity[f] : nlohmann::json();
          if (x.is_null() || y.is_null() || x == y) continue;
          set.conflicts.push_back({index, f, a->first, json_brief(x, 80), b->first, json_brief(y, 80)});
          found = true;
          break;
        }
      }
    }
  }
  // One stat() per file, not per item: a WebDataset shard's items, in index order, name it one
  // after the other.
  std::string last_file;
  bool last_exists = false;
  for (auto& [index, entry] : set.items) {
    const nlohmann::json& rec = entry.record;
    if (status_of(rec) != "ok") {
      entry.state = ItemState::kFailed;
      continue;
    }
    auto file = rec.find("file_name");
    bool has_file = false;
    if (file != rec.end() && file->is_string()) {
      const std::string& name = file->get_ref<const std::string&>();
      if (name != last_file) {
        last_file = name;
        last_exists = fs::exists(fs::path(dir) / name, ec);
      }
      has_file = last_exists;
    }
    entry.state = has_file ? ItemState::kDone : ItemState::kMissingFile;
  }
  return set;
}

MergeResult write_merged(const std::string& dir, const ManifestSet& set) {
  namespace fs = std::filesystem;
  MergeResult result;
  result.torn_lines = set.torn_lines;
  result.duplicates = set.duplicates;
  result.conflicts = set.conflicts.size();
  std::string metadata, failures;
  for (const auto& [index, entry] : set.items) {
    if (entry.state == ItemState::kMissingFile) continue;
    std::string& to = entry.state == ItemState::kDone ? metadata : failures;
    dump_without_finished_at(entry.record, to);
    to += '\n';
    ++(entry.state == ItemState::kDone ? result.ok : result.failed);
  }
  write_file_atomically((fs::path(dir) / "metadata.jsonl").string(), metadata);
  write_file_atomically((fs::path(dir) / "failures.jsonl").string(), failures);
  write_indexes(dir, set, result);
  return result;
}

MergeResult merge_manifests(const std::string& dir) { return write_merged(dir, read_manifests(dir)); }

}  // namespace dpinfer::io

// dpinfer_slurm_check: the SLURM tests' independent reader of what a run left on disk,
// so that the shell tests in tests/slurm/ need neither Python nor jq. It reads the
// manifests and PNGs itself (nlohmann/json, POSIX), not through dpinfer's own code,
// so that a bug in dpinfer's merge cannot hide from the check.
//
//   outputs OUT --items N [--manifests GLOB] [--expect-manifests A,B] [--metadata] [--counts 2,2,3]
//       Every item 0..N-1 has exactly one "ok" record across the manifests OUT/GLOB (made
//       once: nothing was recomputed) and a PNG; no record has another status. With
//       --metadata, OUT/metadata.jsonl holds each index once, each naming an existing file.
//       --counts: the ok records per manifest, sorted, must be these. Prints
//       {"manifest name": ok records, ...}.
//   no-error-after-ok OUT
//       No item has an error record written after its ok record (the merge would keep the
//       error, while resume skips the item for its PNG).
//   snapshot OUT GLOB
//       "file_name inode mtime_ns" of the PNG of every ok record in OUT/GLOB, sorted.
//   json FILE /json/pointer=VALUE[|VALUE...] ...
//       Each pointer's value in FILE equals one of the VALUEs (compared as JSON when a
//       VALUE parses as JSON, else as a string).
//
// Exit status: 0 when every check holds, 1 with one line "slurm_check: FAIL: ..." when
// one does not, 2 for a bad command line.

#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Failure {
  std::string what;
};
struct Usage {
  std::string what;
};

[[noreturn]] void fail(const std::string& what) { throw Failure{what}; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep))
    if (!part.empty()) out.push_back(part);
  return out;
}

std::vector<json> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read " + path.string());
  std::vector<json> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      rows.push_back(json::parse(line));
    } catch (const json::exception&) {
      fail(path.string() + " line " + std::to_string(n) + " is not JSON: " + line.substr(0, 120));
    }
  }
  return rows;
}

// The files in `dir` whose names match the shell pattern `glob`, sorted by name.
std::vector<fs::path> matching(const fs::path& dir, const std::string& glob) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && ::fnmatch(glob.c_str(), e.path().filename().c_str(), 0) == 0) out.push_back(e.path());
  if (ec) fail("cannot list " + dir.string() + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return json(names).dump();
}

bool is_png(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  return in.gcount() == 8 && std::string(sig, 8) == std::string("\x89PNG\r\n\x1a\n", 8);
}

std::string png_name(long index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06ld.png", index);
  return buf;
}

int check_outputs(const std::vector<std::string>& args) {
  if (args.empty()) throw Usage{"outputs needs OUT"};
  const fs::path out = args[0];
  long items = -1;
  std::string glob = "manifest*.jsonl", expect, counts;
  bool metadata = false;
  for (size_t i = 1; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw Usage{args[i] + " needs a value"};
      return args[++i];
    };
    if (args[i] == "--items") items = std::stol(value());
    else if (args[i] == "--manifests") glob = value();
    else if (args[i] == "--expect-manifests") expect = value();
    else if (args[i] == "--counts") counts = value();
    else if (args[i] == "--metadata") metadata = true;
    else throw Usage{"outputs: unknown option " + args[i]};
  }
  if (items < 0) throw Usage{"outputs needs --items N"};

  const auto paths = matching(out, glob);
  if (paths.empty()) fail("no manifest matches " + (out / glob).string() + "; the directory holds " + listing(out));
  std::vector<std::string> names;
  for (const auto& p : paths) names.push_back(p.filename().string());
  if (!expect.empty()) {
    auto want = split(expect, ',');
    std::sort(want.begin(), want.end());
    if (names != want) fail("manifests " + json(names).dump() + ", expected " + json(want).dump());
  }

  std::map<long, std::vector<std::string>> ok_by_index;
  json per_manifest = json::object();
  for (size_t m = 0; m < paths.size(); ++m) {
    int ok = 0;
    for (const auto& r : read_jsonl(paths[m])) {
      const long index = r.value("index", -1L);
      if (r.value("status", "") != "ok")
        fail(names[m] + ": item " + std::to_string(index) + " has status " + r.value("status", "?") + ": " +
             r.value("error", ""));
      ok_by_index[index].push_back(names[m]);
      ++ok;
    }
    per_manifest[names[m]] = ok;
  }
  for (const auto& [index, where] : ok_by_index) {
    if (index < 0 || index >= items) fail("a record for item " + std::to_string(index) + ", outside 0.." + std::to_string(items - 1));
    if (where.size() > 1)
      fail("item " + std::to_string(index) + " was generated more than once (recomputed): " + json(where).dump());
  }
  for (long i = 0; i < items; ++i) {
    if (!ok_by_index.count(i)) fail("no ok record for item " + std::to_string(i) + "; ok records per manifest " + per_manifest.dump());
    const fs::path png = out / png_name(i);
    std::error_code ec;
    if (!fs::is_regular_file(png) || fs::file_size(png, ec) == 0 || !is_png(png))
      fail(png.string() + " is missing, empty or not a PNG");
  }

  if (metadata) {
    const fs::path meta = out / "metadata.jsonl";
    if (!fs::is_regular_file(meta)) fail(meta.string() + " is missing");
    std::vector<long> indices;
    for (const auto& r : read_jsonl(meta)) {
      indices.push_back(r.value("index", -1L));
      const std::string file = r.value("file_name", "");
      if (file.empty() || !fs::is_regular_file(out / file))
        fail("metadata.jsonl row " + std::to_string(indices.back()) + " names a missing file '" + file + "'");
    }
    std::vector<long> sorted = indices, want(static_cast<size_t>(items));
    std::sort(sorted.begin(), sorted.end());
    for (long i = 0; i < items; ++i) want[static_cast<size_t>(i)] = i;
    if (sorted != want)
      fail("metadata.jsonl has indices " + json(indices).dump() + ", expected each of 0.." + std::to_string(items - 1) + " once");
  }

  if (!counts.empty()) {
    std::vector<int> got, want;
    for (const auto& [name, n] : per_manifest.items()) got.push_back(n.get<int>());
    for (const auto& c : split(counts, ',')) want.push_back(std::stoi(c));
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    if (got != want) fail("ok records per manifest " + per_manifest.dump() + ", expected the counts " + json(want).dump());
  }
  std::cout << per_manifest.dump() << "\n";
  return 0;
}

int no_error_after_ok(const std::vector<std::string>& args) {
  if (args.size() != 1) throw Usage{"no-error-after-ok needs OUT"};
  std::map<long, json> ok;
  std::vector<std::string> bad;
  for (const auto& m : matching(args[0], "manifest*.jsonl"))
    for (const auto& r : read_jsonl(m)) {
      const long index = r.value("index", -1L);
      if (r.value("status", "") == "ok") ok[index] = r;
      else if (ok.count(index) && r.value("finished_at", 0.0) >= ok[index].value("finished_at", 0.0))
        bad.push_back(m.filename().string() + ": item " + std::to_string(index) +
                      " was written (PNG, ok record) and then recorded as failed: " + r.value("error", ""));
    }
  for (const auto& b : bad) std::cerr << b << "\n";
  if (!bad.empty()) fail(std::to_string(bad.size()) + " item(s) recorded ok and then failed");
  return 0;
}

int snapshot(const std::vector<std::string>& args) {
  if (args.size() != 2) throw Usage{"snapshot needs OUT GLOB"};
  std::set<std::string> files;
  for (const auto& m : matching(args[0], args[1]))
    for (const auto& r : read_jsonl(m))
      if (r.value("status", "") == "ok") files.insert(r.value("file_name", ""));
  for (const auto& f : files) {
    struct stat st {};
    const std::string path = (fs::path(args[0]) / f).string();
    if (::stat(path.c_str(), &st) != 0) fail(path + " is recorded ok but does not exist");
    std::cout << f << " " << st.st_ino << " " << (static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec)
              << "\n";
  }
  return 0;
}

int check_json(const std::vector<std::string>& args) {
  if (args.size() < 2) throw Usage{"json needs FILE and at least one /pointer=VALUE"};
  std::ifstream in(args[0]);
  if (!in) fail("cannot read " + args[0]);
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    fail(args[0] + " is not JSON: " + e.what());
  }
  for (size_t i = 1; i < args.size(); ++i) {
    const auto eq = args[i].find('=');
    if (eq == std::string::npos || args[i][0] != '/') throw Usage{"expected /json/pointer=VALUE, got " + args[i]};
    const json::json_pointer ptr(args[i].substr(0, eq));
    if (!doc.contains(ptr)) fail(args[0] + " has no " + ptr.to_string() + ": " + doc.dump());
    const json& got = doc.at(ptr);
    bool matched = false;
    for (const auto& alt : split(args[i].substr(eq + 1), '|')) {
      const json want = json::accept(alt) ? json::parse(alt) : json(alt);
      matched = matched || got == want;
    }
    if (!matched) fail(args[0] + ": " + ptr.to_string() + " is " + got.dump() + ", expected " + args[i].substr(eq + 1));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string cmd = args.empty() ? "" : args.front();
  if (!args.empty()) args.erase(args.begin());
  try {
    if (cmd == "outputs") return check_outputs(args);
    if (cmd == "no-error-after-ok") return no_error_after_ok(args);
    if (cmd == "snapshot") return snapshot(args);
    if (cmd == "json") return check_json(args);
    throw Usage{"unknown command '" + cmd + "'"};
  } catch (const Failure& f) {
    std::cerr << "slurm_check: FAIL: " << f.what << "\n";
    return 1;
  } catch (const Usage& u) {
    std::cerr << "slurm_check: " << u.what
              << "; usage: outputs|no-error-after-ok|snapshot|json ... (see tests/slurm/slurm_check.cpp)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "slurm_check: FAIL: " << e.what() << "\n";
    return 1;
  }
}

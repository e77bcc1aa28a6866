#include "dpinfer/io/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/util/error.h"

namespace dpinfer::io {

ManifestWriter::ManifestWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open manifest '" + path + "': " + std::strerror(errno));
}

ManifestWriter::~ManifestWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ManifestWriter::append(const nlohmann::json& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot append to manifest '" + path_ + "': " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

MergeResult merge_manifests(const std::string& dir) {
  namespace fs = std::filesystem;
  MergeResult result;
  std::map<int64_t, nlohmann::json> latest;  // by item index
  std::error_code ec;
  std::vector<fs::path> manifests;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("manifest", 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0)
      manifests.push_back(e.path());
  }
  std::sort(manifests.begin(), manifests.end());
  for (const auto& m : manifests) {
    std::ifstream in(m);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!rec.is_object() || !rec.contains("index") || !rec["index"].is_number_integer()) {
        ++result.torn_lines;
        continue;
      }
      int64_t index = rec["index"].get<int64_t>();
      auto it = latest.find(index);
      double t = rec.value("finished_at", 0.0);
      if (it == latest.end() || t >= it->second.value("finished_at", 0.0)) latest[index] = std::move(rec);
    }
  }
  std::string metadata, failures;
  for (auto& [index, rec] : latest) {
    bool ok = rec.value("status", "") == "ok";
    bool has_file = ok && rec.contains("file_name") && fs::exists(fs::path(dir) / rec["file_name"].get<std::string>(), ec);
    rec.erase("finished_at");
    if (has_file) {
      metadata += rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      ++result.ok;
    } else if (!ok) {
      failures += rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      ++result.failed;
    }
  }
  write_file_atomically((fs::path(dir) / "metadata.jsonl").string(), metadata);
  write_file_atomically((fs::path(dir) / "failures.jsonl").string(), failures);
  return result;
}

}  // namespace dpinfer::io

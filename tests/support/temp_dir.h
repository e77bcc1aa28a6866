#pragma once
// A directory under $TMPDIR that is removed with its contents when the test ends.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpinfer::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// The whole content of `path`, or "" when it cannot be read.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& content);
/// Each non-empty line of the JSON-lines file `path`, parsed (a manifest, metadata.jsonl).
std::vector<nlohmann::json> read_jsonl(const std::string& path);
bool contains(const std::string& haystack, const std::string& needle);

}  // namespace dpinfer::test

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

/// A tmpfs mounted on a directory for one test (a small disk that fills up, or a
/// read-only one), unmounted when the test ends. Mounting needs root (CAP_SYS_ADMIN),
/// as the tests have here and in CI; elsewhere ok() is false and why() says why, for
/// GTEST_SKIP.
class TmpfsMount {
 public:
  /// Mounts on `dir` (created if missing) a tmpfs of `size` ("400k"), read-only when asked.
  TmpfsMount(const std::string& dir, const std::string& size, bool read_only = false);
  ~TmpfsMount();
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_, why_;
  bool mounted_ = false;
};

/// The whole content of `path`, or "" when it cannot be read.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& content);
/// Each non-empty line of the JSON-lines file `path`, parsed (a manifest, metadata.jsonl).
std::vector<nlohmann::json> read_jsonl(const std::string& path);
bool contains(const std::string& haystack, const std::string& needle);

}  // namespace dpinfer::test

#include "support/temp_dir.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dpinfer::test {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dpinfer-test-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TmpfsMount::TmpfsMount(const std::string& dir, const std::string& size, bool read_only) : dir_(dir) {
  ::mkdir(dir.c_str(), 0755);
  const std::string options = "size=" + size + ",mode=0755";
  if (::mount("tmpfs", dir.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, options.c_str()) == 0) {
    mounted_ = true;
  } else {
    why_ = "cannot mount a tmpfs on " + dir + " (" + std::strerror(errno) +
           "): this test needs root with CAP_SYS_ADMIN, as in CI";
  }
}

TmpfsMount::~TmpfsMount() {
  if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
}

}  // namespace dpinfer::test

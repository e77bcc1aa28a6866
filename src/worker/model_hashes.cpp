#include "dpinfer/worker/model_hashes.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::worker {
namespace {

constexpr size_t kReadBytes = size_t{4} << 20;

/// What identifies a file's contents for the cache without reading it.
nlohmann::json file_stamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw InputError(quote(path) + ": cannot read it to hash it (" + std::strerror(errno) + ")");
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return {{"path", path}, {"size", static_cast<int64_t>(st.st_size)}, {"mtime_ns", mtime_ns}};
}

/// The digest `ctx` has so far, as lowercase hex.
std::string hex_digest(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += {hex[digest[i] >> 4], hex[digest[i] & 15]};
  return out;
}

/// SHA-256 over `files` one after the other; with `skip_header`, each file from the end of
/// its safetensors header on (8-byte little-endian length, then that many header bytes).
std::string sha256_of(const std::vector<std::string>& files, bool skip_header) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("SHA-256: OpenSSL failed to start");
  std::vector<unsigned char> buf(kReadBytes);
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(quote(path) + ": cannot read it to hash it (" + std::strerror(errno) + ")");
    std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
      ::close(*f);
      delete f;
    });
    if (skip_header) {
      unsigned char len[8];
      if (::pread(fd, len, 8, 0) != 8) throw InputError(quote(path) + ": too short for a safetensors file");
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
      if (n > io::SafetensorsFile::kMaxHeaderBytes) throw InputError(quote(path) + ": not a safetensors file");
      if (::lseek(fd, static_cast<off_t>(8 + n), SEEK_SET) < 0)
        throw InputError(quote(path) + ": cannot read it to hash it (" + std::strerror(errno) + ")");
    }
    for (;;) {
      const ssize_t got = ::read(fd, buf.data(), buf.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw InputError(quote(path) + ": cannot read it to hash it (" + std::strerror(errno) + ")");
      if (got == 0) break;
      EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(got));
    }
  }
  return hex_digest(ctx.get());
}

}  // namespace

std::string sha256_of_bytes(const std::string& bytes) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("SHA-256: OpenSSL failed to start");
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return hex_digest(ctx.get());
}

std::string sha256_of_files(const std::vector<std::string>& files) { return sha256_of(files, false); }

HashCache::HashCache(std::string out_dir) : path_((std::filesystem::path(out_dir) / "hashes.json").string()) {
  std::string text, why;
  if (read_whole_file(path_, io::kMaxJsonFileBytes, &text, &why) != ReadStatus::kOk) return;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.is_object() && j.value("version", 0) == 1 && j.contains("entries") && j["entries"].is_object())
      entries_ = j["entries"];
  } catch (const std::exception& e) {
    log::warn("{}: ignored ({}); hashing again", path_, first_line(e.what()));
  }
}

std::string HashCache::cached(const std::string& key, const std::vector<std::string>& files, bool skip_header) {
  nlohmann::json stamps = nlohmann::json::array();
  for (const std::string& f : files) stamps.push_back(file_stamp(f));
  auto it = entries_.find(key);
  if (it != entries_.end() && it->is_object() && it->value("files", nlohmann::json()) == stamps &&
      it->contains("sha256") && (*it)["sha256"].is_string() && (*it)["sha256"].get<std::string>().size() == 64)
    return (*it)["sha256"].get<std::string>();
  const std::string sha = sha256_of(files, skip_header);
  entries_[key] = {{"files", stamps}, {"sha256", sha}};
  changed_ = true;
  return sha;
}

std::string HashCache::files_sha256(const std::vector<std::string>& files) {
  std::string key = "sha256";
  for (const std::string& f : files) key += "\n" + f;
  return cached(key, files, /*skip_header=*/false);
}

std::string HashCache::lora_sha256(const std::string& path) {
  // kohya's trainer writes the same hash into the metadata (train_util.precalculate_safetensors_hashes).
  try {
    const auto file = io::SafetensorsFile::open(path);
    auto it = file->metadata().find("sshs_model_hash");
    if (it != file->metadata().end() && it->second.size() == 64 &&
        it->second.find_first_not_of("0123456789abcdef") == std::string::npos)
      return it->second;
  } catch (const Error&) {
    // hashed below as the bytes it is; the pipeline refuses a bad file by name
  }
  return cached("addnet\n" + path, {path}, /*skip_header=*/true);
}

void HashCache::save() {
  if (!changed_) return;
  nlohmann::json j = {{"version", 1},
                      {"about", "dpinfer's cache of SHA-256 hashes (worker/model_hashes.h), keyed by path, size and "
                                "modification time"},
                      {"entries", entries_}};
  io::write_file_atomically(path_, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  changed_ = false;
}

}  // namespace dpinfer::worker

#pragma once
// POSIX ustar archives, written as they grow, for WebDataset shards: one 512-byte header per
// member, its bytes padded to 512, two zero blocks at the end. Names are at most 100 bytes (a
// shard's members are "<9-digit key>.<ext>"), files at most 8 GiB, so plain ustar suffices.
// Written here, not with libarchive: its ~10 compression libraries would come along for three
// fields of octal text.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dpinfer/io/atomic_file.h"

namespace dpinfer::io {

class TarWriter {
 public:
  /// Starts the archive in `file` (its temporary until published).
  explicit TarWriter(AtomicFileWriter& file) : file_(file) {}
  /// Appends the regular file `name` (mode 0644, owner 0, modified at `mtime` seconds).
  /// Throws Error for a name over 100 bytes.
  void add(const std::string& name, std::string_view bytes, int64_t mtime);
  /// Writes the end-of-archive marker; then the caller syncs and publishes the file.
  void finish();

 private:
  AtomicFileWriter& file_;
};

/// The regular-file members of the ustar archive at `path` whose names end with `suffix`, in
/// the archive's order: (name, bytes). Reads what TarWriter writes (names of up to 100 bytes).
/// Throws Error naming the file for one that cannot be read or ends inside a member.
std::vector<std::pair<std::string, std::string>> read_tar_members(const std::string& path, const std::string& suffix);

/// The ustar header block of a regular file (exposed for the tests).
std::string ustar_header(const std::string& name, uint64_t size, int64_t mtime);

}  // namespace dpinfer::io

#include "dpinfer/io/tar_writer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

constexpr size_t kBlock = 512;

/// `value` in octal, zero-padded to `width` - 1 digits and a NUL, at `field`. Throws Error when it
/// needs more digits (a member of 8 GiB or more).
void octal(char* field, size_t width, uint64_t value) {
  field[width - 1] = '\0';
  for (size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  if (value != 0) throw Error("a tar member of 8 GiB or more does not fit a ustar header");
}

}  // namespace

std::string ustar_header(const std::string& name, uint64_t size, int64_t mtime) {
  if (name.empty() || name.size() > 100) throw Error("tar member name " + quote(name) + " is not 1 to 100 bytes");
  char h[kBlock] = {};
  std::memcpy(h, name.data(), name.size());        // name[100]
  octal(h + 100, 8, 0644);                          // mode
  octal(h + 108, 8, 0);                             // uid
  octal(h + 116, 8, 0);                             // gid
  octal(h + 124, 12, size);                         // size
  octal(h + 136, 12, static_cast<uint64_t>(mtime > 0 ? mtime : 0));  // mtime
  std::memset(h + 148, ' ', 8);                     // chksum, as spaces while summing
  h[156] = '0';                                     // typeflag: a regular file
  std::memcpy(h + 257, "ustar", 6);                 // magic "ustar\0"
  std::memcpy(h + 263, "00", 2);                    // version
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  octal(h + 148, 7, sum);                           // six digits and a NUL, then a space
  h[155] = ' ';
  return std::string(h, kBlock);
}

void TarWriter::add(const std::string& name, std::string_view bytes, int64_t mtime) {
  file_.write(ustar_header(name, bytes.size(), mtime));
  file_.write(bytes);
  const size_t pad = (kBlock - bytes.size() % kBlock) % kBlock;
  if (pad) file_.write(std::string(pad, '\0'));
}

void TarWriter::finish() { file_.write(std::string(2 * kBlock, '\0')); }

std::vector<std::pair<std::string, std::string>> read_tar_members(const std::string& path, const std::string& suffix) {
  std::string bytes, why;
  // A shard is at most --shard-size items; 64 GiB is far past any.
  if (read_whole_file(path, uintmax_t{64} << 30, &bytes, &why) != ReadStatus::kOk)
    throw Error("cannot read the shard " + quote(path) + ": " + why);
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at + 512 <= bytes.size()) {
    const char* h = bytes.data() + at;
    if (h[0] == '\0') return out;  // the end marker
    const std::string name(h, strnlen(h, 100));
    const uint64_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
    if (size > bytes.size() - at - 512) break;
    if ((h[156] == '0' || h[156] == '\0') && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.emplace_back(name, bytes.substr(at + 512, size));
    at += 512 + (size + 511) / 512 * 512;
  }
  throw Error("the shard " + quote(path) + " ends inside a member: it is not a whole tar archive");
}

}  // namespace dpinfer::io

#include "dpinfer/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "dpinfer/io/json_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

using nlohmann::json;

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  int bits;
};

// The reference's Dtype enum and bitsize() (safetensors/src/tensor.rs).
constexpr DtypeEntry kDtypes[] = {
    {Dtype::kBool, "BOOL", 8},
    {Dtype::kU8, "U8", 8},
    {Dtype::kI8, "I8", 8},
    {Dtype::kI16, "I16", 16},
    {Dtype::kU16, "U16", 16},
    {Dtype::kF16, "F16", 16},
    {Dtype::kBF16, "BF16", 16},
    {Dtype::kI32, "I32", 32},
    {Dtype::kU32, "U32", 32},
    {Dtype::kF32, "F32", 32},
    {Dtype::kF64, "F64", 64},
    {Dtype::kI64, "I64", 64},
    {Dtype::kU64, "U64", 64},
    {Dtype::kC64, "C64", 64},
    {Dtype::kF8E4M3, "F8_E4M3", 8},
    {Dtype::kF8E5M2, "F8_E5M2", 8},
    {Dtype::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {Dtype::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    {Dtype::kF8E8M0, "F8_E8M0", 8},
    {Dtype::kF4, "F4", 4},
    {Dtype::kF6E2M3, "F6_E2M3", 6},
    {Dtype::kF6E3M2, "F6_E3M2", 6},
};

const DtypeEntry& entry_of(Dtype dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e;
  throw Error("internal: dtype without a table entry");
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& e : kDtypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

std::string known_dtypes() {
  std::string out;
  for (const auto& e : kDtypes) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

/// JSON text of a header value, cut short and kept on one line, for messages.
std::string brief(const json& value) { return json_brief(value, 60); }

/// A tensor name or metadata key for a message: escaped and cut short.
std::string name_text(const std::string& name) { return quote(name, 100); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
}

/// The offset of the first byte that breaks UTF-8 (RFC 3629: no overlongs, no
/// surrogates, nothing past U+10FFFF), or nullopt when `s` is valid.
std::optional<size_t> first_invalid_utf8(const unsigned char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return std::nullopt;
}

}  // namespace

std::string_view dtype_name(Dtype dtype) {
  return entry_of(dtype).name;
}

int dtype_bits(Dtype dtype) {
  return entry_of(dtype).bits;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // open() proved the product fits
  return n;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(path));
  const std::string where = quote(path);

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw Error(where + ": cannot open: " + open_error_text(path, err) +
                (err == ENOENT || err == ELOOP ? "; check the path, or re-download the model" : ""));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(where + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(where + " is not a regular file; expected a .safetensors file");
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < 8) {
    ::close(fd);
    throw Error(where + ": file is " + std::to_string(file->size_) +
                " bytes, too short for a safetensors header (at least 8); the file is empty or "
                "truncated, re-download it");
  }
  void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) throw Error(where + ": cannot map: " + std::strerror(map_err));
  file->mapping_ = mapping;
  file->parse_header();
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

void SafetensorsFile::release(const std::byte* data, size_t nbytes) const {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<uintptr_t>(mapping_);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  if (begin < base || begin + nbytes > base + size_) return;
  // Whole pages from the one holding `data` up to the one holding its end, which the next
  // tensor may still need: the callers read the file front to back.
  const uintptr_t first = begin & ~(page - 1);
  const uintptr_t last = (begin + nbytes) & ~(page - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse_header() {
  const std::string where = quote(path_);
  const auto* bytes = static_cast<const unsigned char*>(mapping_);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes)
    throw Error(where + ": header length " + std::to_string(n) + " is over the " +
                std::to_string(kMaxHeaderBytes) +
                "-byte limit; this is not a safetensors file or it is corrupt");
  if (n > size_ - 8)
    throw Error(where + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(size_) +
                " bytes); the file is truncated or not a safetensors file, re-download it");
  const unsigned char* header = bytes + 8;
  const size_t data_start = 8 + static_cast<size_t>(n);
  const size_t data_size = size_ - data_start;

  if (auto bad = first_invalid_utf8(header, n))
    throw Error(where + ": header is not valid utf-8 (byte " + std::to_string(*bad) +
                " of the header); the file is corrupt or not a safetensors file");
  json root;
  try {
    root = parse_json_text(std::string_view(reinterpret_cast<const char*>(header), static_cast<size_t>(n)),
                           JsonDialect::kStrict, /*unique_keys=*/true);
  } catch (const JsonDuplicateKey& e) {
    // nlohmann would keep the last, and the first one's bytes would look like a gap.
    if (e.depth() == 1)
      throw Error(where + ": tensor " + name_text(e.key()) +
                  " appears twice in the header; the file is corrupt, re-download it");
    throw Error(where + ": header gives the key " + name_text(e.key()) +
                " twice in one object; the file is corrupt, re-download it");
  } catch (const JsonSyntaxError& e) {
    throw Error(where + ": header is not valid json (" + std::string(e.what()) +
                "); the file is corrupt or not a safetensors file");
  }
  if (!root.is_object())
    throw Error(where + ": header is a json " + std::string(root.type_name()) +
                ", expected an object mapping tensor names to dtype, shape and data_offsets");

  struct Range {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Range> ranges;
  for (const auto& [name, info] : root.items()) {
    if (name == "__metadata__") {
      if (!info.is_object())
        throw Error(where + ": __metadata__ is a json " + std::string(info.type_name()) +
                    ", expected an object of string values");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string())
          throw Error(where + ": __metadata__ entry " + name_text(key) + " is a json " +
                      std::string(value.type_name()) + ", expected a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string tensor = where + ": tensor " + name_text(name);
    if (!info.is_object())
      throw Error(tensor + " is described by a json " + std::string(info.type_name()) +
                  ", expected an object with dtype, shape and data_offsets");

    auto dtype_it = info.find("dtype");
    if (dtype_it == info.end() || !dtype_it->is_string())
      throw Error(tensor + " has no dtype string; the file is corrupt");
    std::optional<Dtype> dtype = parse_dtype(dtype_it->get_ref<const std::string&>());
    if (!dtype)
      throw Error(tensor + " has unknown dtype " + brief(*dtype_it) + " (known: " + known_dtypes() +
                  "); the file was written by a different or newer tool");

    auto shape_it = info.find("shape");
    if (shape_it == info.end() || !shape_it->is_array())
      throw Error(tensor + " has no shape list; the file is corrupt");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& dim : *shape_it) {
      if (dim.is_number_integer() && !dim.is_number_unsigned())
        throw Error(tensor + " has a negative dimension in shape " + brief(*shape_it) +
                    "; the file is corrupt");
      if (!dim.is_number_unsigned())
        throw Error(tensor + " has shape " + brief(*shape_it) +
                    ", expected a list of non-negative integers; the file is corrupt");
      uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / d) overflow = true;
      numel *= d;
      shape.push_back(static_cast<int64_t>(d));
    }
    const int bits = dtype_bits(*dtype);
    if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        numel > std::numeric_limits<uint64_t>::max() / bits)
      throw Error(tensor + " has shape " + brief(*shape_it) +
                  " whose size overflows 64 bits; the file is corrupt");
    if (numel * bits % 8 != 0)
      throw Error(tensor + " has shape " + shape_text(shape) + " of " + std::string(dtype_name(*dtype)) +
                  ", which is not a whole number of bytes; the file is corrupt");
    const uint64_t expected = numel * bits / 8;

    auto off_it = info.find("data_offsets");
    if (off_it == info.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned())
      throw Error(tensor + " has data_offsets " +
                  (off_it == info.end() ? std::string("missing") : brief(*off_it)) +
                  ", expected [begin, end] with two non-negative integers; the file is corrupt");
    const uint64_t begin = (*off_it)[0].get<uint64_t>();
    const uint64_t end = (*off_it)[1].get<uint64_t>();
    if (begin > end)
      throw Error(tensor + " has data_offsets " + range_text(begin, end) +
                  " that end before they begin; the file is corrupt");
    if (end > data_size)
      throw Error(tensor + " has data_offsets " + range_text(begin, end) +
                  " past the end of the data (" + std::to_string(data_size) +
                  " bytes); the file is truncated, re-download it");
    if (end - begin != expected)
      throw Error(tensor + " has shape " + shape_text(shape) + " (" + std::to_string(expected) +
                  " bytes as " + std::string(dtype_name(*dtype)) + ") but data_offsets span " +
                  std::to_string(end - begin) +
                  " bytes; the file is corrupt or truncated, re-download it");

    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    view.shape = std::move(shape);
    view.offset = data_start + static_cast<size_t>(begin);
    view.data = reinterpret_cast<const std::byte*>(bytes) + view.offset;
    view.nbytes = static_cast<size_t>(end - begin);
    ranges.push_back({begin, end, tensors_.size()});
    tensors_.push_back(std::move(view));
  }

  // As the reference does: sorted by (begin, end), the ranges must tile the data
  // area exactly, each starting where the previous one ends.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const Range* previous = nullptr;
  for (const Range& r : ranges) {
    const std::string& name = tensors_[r.tensor].name;
    if (r.begin < cursor)
      throw Error(where + ": tensors " + name_text(tensors_[previous->tensor].name) + " " +
                  range_text(previous->begin, previous->end) + " and " + name_text(name) + " " +
                  range_text(r.begin, r.end) + " overlap; the file is corrupt");
    if (r.begin > cursor)
      throw Error(where + ": tensor " + name_text(name) + " starts at byte " + std::to_string(r.begin) +
                  " of the data but " +
                  (previous ? "the previous tensor " + name_text(tensors_[previous->tensor].name) + " ends at " +
                                  std::to_string(cursor)
                            : std::string("the first tensor must start at 0")) +
                  "; the file has a gap and is corrupt");
    cursor = r.end;
    previous = &r;
  }
  if (cursor != data_size)
    throw Error(where + ": the data area is " + std::to_string(data_size) +
                " bytes but the tensors end at byte " + std::to_string(cursor) +
                "; the file is corrupt or has trailing bytes, re-download it");

  std::vector<TensorView> ordered;
  ordered.reserve(tensors_.size());
  for (const Range& r : ranges) ordered.push_back(std::move(tensors_[r.tensor]));
  tensors_ = std::move(ordered);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

}  // namespace dpinfer::io

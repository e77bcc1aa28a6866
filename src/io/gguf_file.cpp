#include "dpinfer/io/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "dpinfer/util/error.h"
#include "dpinfer/util/files.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "GGUF files dpinfer reads are little-endian; a big-endian host would need byte swapping");

struct TypeEntry {
  GgmlType type;
  std::string_view name;
  int64_t block_size;
  int64_t type_size;
};

// Ref: gguf-py 0.17.1 gguf/constants.py GGML_QUANT_SIZES.
constexpr TypeEntry kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},        {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},    {GgmlType::kQ8_1, "Q8_1", 32, 40},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},   {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},  {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},  {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66}, {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98}, {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},     {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},          {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},        {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},        {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},      {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
};

const TypeEntry* find_type(uint32_t value) {
  for (const auto& e : kTypes)
    if (static_cast<uint32_t>(e.type) == value) return &e;
  return nullptr;
}

const TypeEntry& ggml_entry_of(GgmlType type) {
  if (const TypeEntry* e = find_type(static_cast<uint32_t>(type))) return *e;
  throw Error("internal: ggml type without a table entry");
}

/// The size in bytes of a scalar metadata value of `type`; 0 for a string or an array.
size_t scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

/// A bounded cursor over the mapping: every read checks the bytes left, and a read past the end
/// throws with what was being read.
class Cursor {
 public:
  Cursor(const unsigned char* bytes, size_t size, std::string where) : p_(bytes), size_(size), where_(std::move(where)) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  const unsigned char* here() const { return p_ + pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      throw InputError(where_ + ": " + what + " needs " + std::to_string(n) + " bytes at byte " + std::to_string(pos_) +
                       " but the file has " + std::to_string(left()) +
                       " left; the file is truncated or not a GGUF file, re-download it");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += static_cast<size_t>(n);
  }
  /// GGUF's string: a uint64 length, then that many bytes (UTF-8, not terminated).
  std::string string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + "'s length");
    need(n, what + " of " + std::to_string(n) + " bytes");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  const std::string& where() const { return where_; }

 private:
  const unsigned char* p_;
  size_t size_;
  size_t pos_ = 0;
  std::string where_;
};

std::string value_type_text(uint32_t t) { return "value type " + std::to_string(t); }

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

/// Reads one value of `type` at the cursor, nested `depth` arrays deep; `what` names it.
GgufValue read_value(Cursor& in, GgufValueType type, int depth, const std::string& what) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::kUint8: v.integer = in.read<uint8_t>(what); break;
    case GgufValueType::kInt8: v.integer = in.read<int8_t>(what); break;
    case GgufValueType::kUint16: v.integer = in.read<uint16_t>(what); break;
    case GgufValueType::kInt16: v.integer = in.read<int16_t>(what); break;
    case GgufValueType::kUint32: v.integer = in.read<uint32_t>(what); break;
    case GgufValueType::kInt32: v.integer = in.read<int32_t>(what); break;
    case GgufValueType::kUint64: v.integer = static_cast<int64_t>(in.read<uint64_t>(what)); break;
    case GgufValueType::kInt64: v.integer = in.read<int64_t>(what); break;
    case GgufValueType::kFloat32: v.real = in.read<float>(what); break;
    case GgufValueType::kFloat64: v.real = in.read<double>(what); break;
    case GgufValueType::kBool: {
      const uint8_t b = in.read<uint8_t>(what);
      if (b > 1)
        throw InputError(in.where() + ": " + what + " is a bool of value " + std::to_string(b) +
                         ", expected 0 or 1; the file is corrupt");
      v.integer = b;
      break;
    }
    case GgufValueType::kString: v.text = in.string(what); break;
    case GgufValueType::kArray: {
      if (depth >= GgufFile::kMaxArrayDepth)
        throw InputError(in.where() + ": " + what + " nests arrays more than " +
                         std::to_string(GgufFile::kMaxArrayDepth) + " deep; the file is corrupt");
      const uint32_t element = in.read<uint32_t>(what + "'s element type");
      if (!known_value_type(element))
        throw InputError(in.where() + ": " + what + " is an array of unknown " + value_type_text(element) +
                         "; the file is corrupt or written by a newer tool");
      v.element_type = static_cast<GgufValueType>(element);
      v.count = in.read<uint64_t>(what + "'s length");
      const size_t size = scalar_size(v.element_type);
      // Every element takes at least one byte (a string its 8-byte length), so the count is
      // bounded by the bytes left before anything is allocated for it.
      const uint64_t least = size ? size : (v.element_type == GgufValueType::kString ? 8 : 12);
      if (v.count > in.left() / least)
        throw InputError(in.where() + ": " + what + " claims " + std::to_string(v.count) + " elements but the file has " +
                         std::to_string(in.left()) + " bytes left; the file is truncated or corrupt");
      if (size) {
        v.raw = reinterpret_cast<const std::byte*>(in.here());
        if (v.element_type == GgufValueType::kBool)
          for (uint64_t i = 0; i < v.count; ++i)
            if (in.here()[i] > 1)
              throw InputError(in.where() + ": " + what + "[" + std::to_string(i) +
                               "] is a bool of value " + std::to_string(in.here()[i]) +
                               ", expected 0 or 1; the file is corrupt");
        in.skip(v.count * size, what);
      } else {
        v.items.reserve(static_cast<size_t>(v.count));
        for (uint64_t i = 0; i < v.count; ++i)
          v.items.push_back(read_value(in, v.element_type, depth + 1, what + "[" + std::to_string(i) + "]"));
      }
      break;
    }
  }
  return v;
}

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string_view ggml_type_name(GgmlType type) { return ggml_entry_of(type).name; }
int64_t ggml_block_size(GgmlType type) { return ggml_entry_of(type).block_size; }
int64_t ggml_type_size(GgmlType type) { return ggml_entry_of(type).type_size; }
bool ggml_is_float(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
}

std::optional<uint64_t> GgufValue::as_uint() const {
  switch (type) {
    case GgufValueType::kUint64: return static_cast<uint64_t>(integer);
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64:
      if (integer >= 0) return static_cast<uint64_t>(integer);
      return std::nullopt;
    default: return std::nullopt;
  }
}

int64_t GgufTensor::numel() const {
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // open() proved the product of the dimensions fits
  return n;
}

std::vector<int64_t> GgufTensor::byte_shape() const {
  std::vector<int64_t> out = shape;
  if (!out.empty()) out.back() = out.back() / ggml_block_size(type) * ggml_type_size(type);
  return out;
}

bool GgufFile::has_magic(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  const bool ok = ::pread(fd, magic, 4, 0) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> file(new GgufFile(path));
  const std::string where = quote(path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw InputError(where + ": cannot open: " + open_error_text(path, err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw InputError(where + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(where + " is not a regular file; expected a .gguf file");
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < 24) {
    ::close(fd);
    throw InputError(where + ": file is " + std::to_string(file->size_) +
                     " bytes, too short for a GGUF header (24); the file is empty or truncated, re-download it");
  }
  void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) throw InputError(where + ": cannot map: " + std::strerror(map_err));
  file->mapping_ = mapping;
  file->parse();
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::metadata_string(const std::string& key) const {
  auto it = metadata_.find(key);
  return it != metadata_.end() && it->second.type == GgufValueType::kString ? it->second.text : std::string();
}

void GgufFile::release(const std::byte* data, size_t nbytes) const {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<uintptr_t>(mapping_);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  if (begin < base || begin + nbytes > base + size_) return;
  const uintptr_t first = begin & ~(page - 1);
  const uintptr_t last = (begin + nbytes) & ~(page - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void GgufFile::parse() {
  const std::string where = quote(path_);
  const auto* bytes = static_cast<const unsigned char*>(mapping_);
  Cursor in(bytes, size_, where);

  if (std::memcmp(bytes, "GGUF", 4) != 0)
    throw InputError(where + " does not start with GGUF's magic \"GGUF\" (it starts with " +
                     quote(std::string_view(reinterpret_cast<const char*>(bytes), 4), 20) +
                     "); it is not a GGUF file");
  in.skip(4, "the magic");
  version_ = in.read<uint32_t>("the version");
  if (version_ != 2 && version_ != 3)
    throw InputError(where + ": GGUF version " + std::to_string(version_) +
                     " is not supported (dpinfer reads versions 2 and 3); " +
                     (version_ == 1 ? "convert the file with a newer gguf tool"
                                    : "the file is corrupt or written by a newer tool"));
  const uint64_t n_tensors = in.read<uint64_t>("the tensor count");
  const uint64_t n_kv = in.read<uint64_t>("the metadata count");
  // A key-value takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8 (one dimension).
  if (n_kv > in.left() / 13)
    throw InputError(where + ": header claims " + std::to_string(n_kv) + " metadata entries but the file has " +
                     std::to_string(in.left()) + " bytes left; the file is truncated or corrupt");
  if (n_tensors > in.left() / 32)
    throw InputError(where + ": header claims " + std::to_string(n_tensors) + " tensors but the file has " +
                     std::to_string(in.left()) + " bytes left; the file is truncated or corrupt");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string key = in.string("metadata key " + std::to_string(k));
    const std::string what = "metadata " + quote(key, 100);
    const uint32_t type = in.read<uint32_t>(what + "'s type");
    if (!known_value_type(type))
      throw InputError(where + ": " + what + " has unknown " + value_type_text(type) +
                       "; the file is corrupt or written by a newer tool");
    GgufValue value = read_value(in, static_cast<GgufValueType>(type), 0, what);
    if (!metadata_.emplace(key, std::move(value)).second)
      throw InputError(where + ": " + what + " appears twice; the file is corrupt, re-download it");
  }
  if (auto it = metadata_.find("general.alignment"); it != metadata_.end()) {
    const std::optional<uint64_t> a = it->second.as_uint();
    if (it->second.type != GgufValueType::kUint32 || !a || *a == 0 || (*a & (*a - 1)) != 0)
      throw InputError(where + ": general.alignment must be a uint32 power of two; the file is corrupt");
    alignment_ = static_cast<uint32_t>(*a);
  }

  struct Info {
    uint64_t offset;
    uint64_t nbytes;
  };
  std::vector<Info> infos;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensor tensor;
    tensor.name = in.string("tensor info " + std::to_string(t) + "'s name");
    const std::string what = "tensor " + quote(tensor.name, 100);
    const uint32_t n_dims = in.read<uint32_t>(what + "'s dimension count");
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxDims))
      throw InputError(where + ": " + what + " has " + std::to_string(n_dims) + " dimensions, expected 1 to " +
                       std::to_string(kMaxDims) + "; the file is corrupt");
    std::vector<uint64_t> ne(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) ne[d] = in.read<uint64_t>(what + "'s dimensions");
    const uint32_t type = in.read<uint32_t>(what + "'s type");
    const TypeEntry* entry = find_type(type);
    if (!entry)
      throw InputError(where + ": " + what + " has unknown ggml type " + std::to_string(type) +
                       "; the file is corrupt or written by a newer tool");
    tensor.type = entry->type;
    const uint64_t offset = in.read<uint64_t>(what + "'s offset");

    // The element count, and the bytes: ne[0] in whole blocks, times the other dimensions. The product of
    // the non-zero dimensions must fit in int64 too: 2^40 x 2^40 x 0 is no tensor a writer makes.
    uint64_t product = 1;
    bool overflow = false, empty = false;
    for (uint64_t d : ne) {
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      if (d == 0) empty = true;
      if (d != 0 && product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d) overflow = true;
      if (!overflow && d != 0) product *= d;
    }
    const uint64_t numel = empty ? 0 : product;
    for (auto it = ne.rbegin(); it != ne.rend(); ++it) tensor.shape.push_back(static_cast<int64_t>(*it));
    if (overflow)
      throw InputError(where + ": " + what + " has dimensions whose product overflows 64 bits; the file is corrupt");
    if (ne[0] % static_cast<uint64_t>(entry->block_size) != 0)
      throw InputError(where + ": " + what + " of shape " + dims_text(tensor.shape) + " is " +
                       std::string(entry->name) + ", whose blocks of " + std::to_string(entry->block_size) +
                       " values do not divide its last dimension; the file is corrupt");
    // A row in bytes (byte_shape()) fits in int64 too, even in a tensor of no elements.
    if (ne[0] / static_cast<uint64_t>(entry->block_size) >
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / entry->type_size))
      throw InputError(where + ": " + what + "'s rows overflow 64 bits in bytes; the file is corrupt");
    const uint64_t blocks = numel / static_cast<uint64_t>(entry->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(entry->type_size))
      throw InputError(where + ": " + what + "'s size overflows 64 bits; the file is corrupt");
    const uint64_t nbytes = blocks * static_cast<uint64_t>(entry->type_size);
    if (offset % alignment_ != 0)
      throw InputError(where + ": " + what + "'s data offset " + std::to_string(offset) +
                       " is not a multiple of the alignment " + std::to_string(alignment_) +
                       "; the file is corrupt");
    tensor.nbytes = static_cast<size_t>(nbytes);
    infos.push_back({offset, nbytes});
    if (!index_.emplace(tensor.name, tensors_.size()).second)
      throw InputError(where + ": " + what + " appears twice; the file is corrupt, re-download it");
    tensors_.push_back(std::move(tensor));
  }

  // The data starts at the next multiple of the alignment after the infos.
  const uint64_t data_start = (static_cast<uint64_t>(in.pos()) + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start > size_)
    throw InputError(where + ": the tensor data would start at byte " + std::to_string(data_start) +
                     " past the end of the file (" + std::to_string(size_) +
                     " bytes); the file is truncated, re-download it");
  const uint64_t data_size = tensors_.empty() ? 0 : size_ - data_start;
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Info& info = infos[i];
    if (info.offset > data_size || info.nbytes > data_size - info.offset)
      throw InputError(where + ": tensor " + quote(tensors_[i].name, 100) + " (" + std::to_string(info.nbytes) +
                       " bytes of " + std::string(ggml_type_name(tensors_[i].type)) + " at data offset " +
                       std::to_string(info.offset) + ") runs past the end of the file (" +
                       std::to_string(data_size) + " bytes of data); the file is truncated, re-download it");
    tensors_[i].offset = static_cast<size_t>(data_start + info.offset);
    tensors_[i].data = reinterpret_cast<const std::byte*>(bytes) + tensors_[i].offset;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return infos[a].offset < infos[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const Info& prev = infos[order[k - 1]];
    if (infos[order[k]].offset < prev.offset + prev.nbytes)
      throw InputError(where + ": tensors " + quote(tensors_[order[k - 1]].name, 100) + " and " +
                       quote(tensors_[order[k]].name, 100) + " overlap in the data; the file is corrupt");
  }
}

}  // namespace dpinfer::io

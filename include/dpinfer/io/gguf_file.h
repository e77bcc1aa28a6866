#pragma once
// A read-only view of a GGUF file (ggml's model format, versions 2 and 3): the magic "GGUF", a
// version, the tensor and key-value counts, the metadata key-values, one info per tensor (name,
// dimensions, ggml type, offset), padding to the alignment, then the tensor data, each tensor at
// an aligned offset from the start of the data. Ref: ggml docs/gguf.md and gguf-py 0.17.1
// gguf/gguf_reader.py, which diffusers 0.36's load_gguf_checkpoint reads the files with.
// Everything is checked when the file is opened, before any tensor data is touched: every count
// and length against the bytes left, every tensor's data inside the file. Free of LibTorch.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dpinfer::io {

/// ggml's tensor types that GGUF files name by number (ggml.h enum ggml_type; gguf-py
/// GGMLQuantizationType). Those missing from the enum (4, 5, 31-33: removed types) are refused.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

/// The name gguf-py gives `type` ("Q4_K", "BF16").
std::string_view ggml_type_name(GgmlType type);
/// How many values one block of `type` holds (1 for the plain types, 32 or 256 for the quantized).
int64_t ggml_block_size(GgmlType type);
/// How many bytes one block of `type` takes (gguf-py GGML_QUANT_SIZES).
int64_t ggml_type_size(GgmlType type);
/// Whether `type` is one of the plain float types (F32, F16, BF16), read as values.
bool ggml_is_float(GgmlType type);

/// The types of GGUF's metadata values (gguf-py GGUFValueType).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

/// One metadata value. A scalar integer is held in `integer` (as int64; a uint64 above INT64_MAX
/// wraps, read it with as_uint()), a float in `real`, a bool in `integer` (0 or 1), a string in
/// `text`. An array of strings or arrays holds its elements in `items`; an array of numbers keeps
/// them in the file (`raw`, `count` elements of `element_type`) rather than one object each.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  GgufValueType element_type = GgufValueType::kUint8;  ///< an array's
  uint64_t count = 0;                                  ///< an array's length
  std::vector<GgufValue> items;                        ///< an array of strings or arrays
  const std::byte* raw = nullptr;                      ///< an array of numbers, in the mapping

  /// The value as an unsigned integer when it is an integer type that holds a non-negative value.
  std::optional<uint64_t> as_uint() const;
};

/// One tensor of an open file. `data` points into the file's read-only mapping and is valid
/// while the GgufFile lives.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  /// The logical shape in PyTorch's order (the file's dimensions reversed: ggml's ne[0], the
  /// innermost, is the last), as diffusers' GGUFParameter.quant_shape gives it.
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  size_t offset = 0;  ///< where `data` starts, counted from the start of the file

  /// The product of `shape`.
  int64_t numel() const;
  /// The shape of the bytes as gguf-py's reader gives a quantized tensor to diffusers: `shape`
  /// with the last dimension counted in bytes (shape[-1] / block_size * type_size).
  std::vector<int64_t> byte_shape() const;
};

/// A GGUF file mapped read-only. open() checks the magic and version (2 or 3; version 1's 32-bit
/// counts are refused), every metadata key and value (bounded: each count and length against the
/// bytes left in the file, arrays nested at most kMaxArrayDepth deep, no key twice), every tensor
/// info (at most 4 dimensions, none negative, the innermost a whole number of blocks, a known
/// type, no name twice), the alignment (general.alignment, a power of two, default 32), and that
/// each tensor's data starts at an aligned offset and lies inside the file, without overlapping
/// another's. A file that breaks a rule is refused with a one-line dpinfer::InputError naming the
/// file and what is wrong.
class GgufFile {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr int kMaxArrayDepth = 8;
  static constexpr int kMaxDims = 4;  ///< GGML_MAX_DIMS

  /// Maps and validates `path`. Throws dpinfer::InputError.
  static std::shared_ptr<const GgufFile> open(const std::string& path);
  /// Whether `path` starts with GGUF's magic; false when it cannot be read.
  static bool has_magic(const std::string& path);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  /// Every tensor, in the order of its info in the file.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const GgufTensor* find(const std::string& name) const;
  /// Every metadata key-value, by key.
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  /// The metadata value `key` when it is a string, else "".
  std::string metadata_string(const std::string& key) const;
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  /// As SafetensorsFile::release: the whole pages of [data, data + nbytes) leave this process.
  void release(const std::byte* data, size_t nbytes) const;

 private:
  explicit GgufFile(std::string path) : path_(std::move(path)) {}
  void parse();

  std::string path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, GgufValue> metadata_;
};

}  // namespace dpinfer::io

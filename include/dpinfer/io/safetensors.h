#pragma once
// A read-only view of a .safetensors file: an 8-byte little-endian header length N,
// N bytes of JSON naming every tensor's dtype, shape and byte range, then the raw
// row-major little-endian data (huggingface/safetensors, safetensors/src/tensor.rs).
// The whole file is validated when it is opened, before any tensor data is touched.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dpinfer::io {

/// The element types of the safetensors format, named as in its header.
enum class Dtype {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kC64,
  kF8E4M3,
  kF8E5M2,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kF8E8M0,
  kF4,
  kF6E2M3,
  kF6E3M2,
};

/// The header's name of `dtype`: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(Dtype dtype);

/// The size of one element of `dtype` in bits (4 and 6 for the sub-byte float types).
int dtype_bits(Dtype dtype);

/// One tensor of an open file. `data` points into the file's read-only mapping and is
/// valid while the SafetensorsFile lives; never write through it.
struct TensorView {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;  ///< empty for a 0-d tensor
  const std::byte* data;       ///< `nbytes` bytes; not aligned beyond what the file gives
  size_t nbytes;
  size_t offset;  ///< where `data` starts, counted from the start of the file

  /// The product of `shape` (1 for a 0-d tensor).
  int64_t numel() const;
};

/// A safetensors file mapped read-only. Every rule of the format is checked by open():
/// header length, UTF-8 JSON object, known dtypes, non-negative shapes whose byte count
/// does not overflow, data_offsets that match the shape and tile the data area exactly
/// (no gaps, no overlaps, nothing after the last tensor), and a string-to-string
/// `__metadata__`. A file that breaks one is refused with a one-line dpinfer::Error
/// naming the file and the tensor; nothing malformed is ever read out of bounds.
class SafetensorsFile {
 public:
  /// The reference implementation's limit on the JSON header (MAX_HEADER_SIZE).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  /// Maps and validates `path`. Throws dpinfer::Error when the file cannot be read
  /// or is not a valid safetensors file.
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  /// Every tensor, in the order of its data in the file.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const TensorView* find(const std::string& name) const;
  /// The header's `__metadata__` (empty when it has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The path the file was opened with.
  const std::string& path() const { return path_; }
  /// The size of the whole file in bytes.
  size_t file_size() const { return size_; }

  /// Tells the kernel that the bytes [data, data + nbytes) of this file were read and
  /// are not needed again: the whole pages among them leave this process's memory
  /// (madvise MADV_DONTNEED; a private read-only mapping reads them again from the page
  /// cache if they are touched later). A loader that copies tensor by tensor so holds
  /// one chunk of the file at a time, not the whole file, in its resident set.
  void release(const std::byte* data, size_t nbytes) const;

 private:
  explicit SafetensorsFile(std::string path) : path_(std::move(path)) {}
  void parse_header();

  std::string path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace dpinfer::io

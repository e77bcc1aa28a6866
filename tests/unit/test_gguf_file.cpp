// The GGUF reader against files written by the PyPI gguf package (tools/fixtures/make_gguf_fixtures.py),
// their truncations, and files crafted byte by byte with one broken rule each.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::io {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = std::string(DPINFER_TEST_DATA_DIR) + "/gguf/";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename T>
std::string le(T value) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &value, sizeof(T));
  return s;
}

std::string gguf_string(const std::string& s) { return le<uint64_t>(s.size()) + s; }

/// A small GGUF v3 file, built field by field: one u32 metadata key and one F32 tensor [2, 4] (ne = {4, 2}) at
/// data offset 0, aligned to 32. Each field can be replaced to break one rule.
struct Crafted {
  uint32_t version = 3;
  uint64_t n_tensors = 1;
  uint64_t n_kv = 1;
  std::string kv = gguf_string("general.alignment") + le<uint32_t>(4) + le<uint32_t>(32);
  std::string name = "w";
  uint32_t n_dims = 2;
  std::vector<uint64_t> ne = {4, 2};
  uint32_t type = 0;  // F32
  uint64_t offset = 0;
  size_t data_bytes = 32;
  std::string extra_info;  // appended after the tensor info (a second tensor)

  std::string bytes() const {
    std::string s = "GGUF" + le(version) + le(n_tensors) + le(n_kv) + kv;
    s += gguf_string(name) + le(n_dims);
    for (uint64_t d : ne) s += le(d);
    s += le(type) + le(offset) + extra_info;
    s.append((32 - s.size() % 32) % 32, '\0');
    s.append(data_bytes, '\x01');
    return s;
  }
};

class GgufReader : public ::testing::Test {
 protected:
  std::string write(const std::string& bytes) {
    const std::string path = dir_.file("model.gguf");
    test::write_file(path, bytes);
    return path;
  }
  std::string error_of(const std::string& bytes) {
    const std::string path = write(bytes);
    try {
      GgufFile::open(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  void expect_error(const std::string& bytes, const std::string& part) {
    const std::string message = error_of(bytes);
    EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
    EXPECT_NE(message.find("'" + dir_.file("model.gguf") + "'"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  test::TempDir dir_;
};

TEST_F(GgufReader, ReadsEveryMetadataTypeOfTheGgufPackage) {
  auto f = GgufFile::open(kData + "metadata.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  const auto& m = f->metadata();
  EXPECT_EQ(f->metadata_string("general.architecture"), "flux");
  EXPECT_EQ(m.at("test.u8").integer, 200);
  EXPECT_EQ(m.at("test.i8").integer, -100);
  EXPECT_EQ(m.at("test.u16").integer, 60000);
  EXPECT_EQ(m.at("test.i16").integer, -30000);
  EXPECT_EQ(m.at("test.u32").integer, 4000000000);
  EXPECT_EQ(m.at("test.i32").integer, -2000000000);
  EXPECT_EQ(m.at("test.f32").real, 1.5);
  EXPECT_EQ(*m.at("test.u64").as_uint(), 18000000000000000000ull);
  EXPECT_EQ(m.at("test.i64").integer, -9000000000000000000ll);
  EXPECT_EQ(m.at("test.f64").real, -2.25);
  EXPECT_EQ(m.at("test.bool").integer, 1);
  EXPECT_EQ(m.at("test.string").text, "h\xc3\xa9llo");
  const GgufValue& ints = m.at("test.ints");
  ASSERT_EQ(ints.type, GgufValueType::kArray);
  ASSERT_EQ(ints.count, 3u);
  ASSERT_NE(ints.raw, nullptr);
  const size_t int_size = ints.element_type == GgufValueType::kInt64 || ints.element_type == GgufValueType::kUint64 ? 8 : 4;
  int64_t third = 0;
  std::memcpy(&third, ints.raw + 2 * int_size, int_size);
  EXPECT_EQ(third, 3);
  const GgufValue& strings = m.at("test.strings");
  ASSERT_EQ(strings.items.size(), 3u);
  EXPECT_EQ(strings.items[1].text, "bc");
  EXPECT_EQ(strings.items[2].text, "");
  EXPECT_EQ(m.at("test.bools").count, 2u);
  const GgufValue& nested = m.at("test.nested");
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].count, 2u);
  EXPECT_EQ(nested.items[1].count, 1u);

  ASSERT_EQ(f->tensors().size(), 3u);
  const GgufTensor* f32 = f->find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->type, GgmlType::kF32);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f32->nbytes, 24u);
  float values[6];
  std::memcpy(values, f32->data, 24);
  EXPECT_EQ(values[5], 5.0f);
  const GgufTensor* q8 = f->find("q8_0");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, GgmlType::kQ8_0);
  EXPECT_EQ(q8->shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(q8->byte_shape(), (std::vector<int64_t>{2, 34}));
  EXPECT_EQ(q8->nbytes, 68u);
  EXPECT_EQ(f->find("f16")->shape, (std::vector<int64_t>{5}));
  for (const GgufTensor& t : f->tensors()) EXPECT_EQ((t.offset - f->tensors()[0].offset) % 32, 0u) << t.name;
  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST_F(GgufReader, HonoursACustomAlignment) {
  auto f = GgufFile::open(kData + "aligned64.gguf");
  EXPECT_EQ(f->alignment(), 64u);
  for (const GgufTensor& t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  float values[6];
  std::memcpy(values, f->find("f32")->data, 24);
  EXPECT_EQ(values[4], 4.0f);
}

TEST_F(GgufReader, ReadsTheTypesTable) {
  EXPECT_EQ(ggml_type_name(GgmlType::kQ4_K), "Q4_K");
  EXPECT_EQ(ggml_block_size(GgmlType::kQ6_K), 256);
  EXPECT_EQ(ggml_type_size(GgmlType::kQ6_K), 210);
  EXPECT_EQ(ggml_type_size(GgmlType::kQ5_1), 24);
  EXPECT_TRUE(ggml_is_float(GgmlType::kBF16));
  EXPECT_FALSE(ggml_is_float(GgmlType::kQ8_0));
}

TEST_F(GgufReader, ReadsVersion2) {
  std::string bytes = read_all(kData + "metadata.gguf");
  bytes[4] = 2;  // v2 and v3 share the layout (v3 adds big-endian files, which dpinfer does not read)
  auto f = GgufFile::open(write(bytes));
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors().size(), 3u);
}

TEST_F(GgufReader, EveryTruncationIsOneLine) {
  // Every prefix of a real file but the whole: refused, never read out of bounds (ASan in the fuzz build).
  const std::string bytes = read_all(kData + "dequant.gguf");
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t n = 0; n < bytes.size(); n += (n < 1200 ? 1 : 97)) {
    const std::string message = error_of(bytes.substr(0, n));
    ASSERT_FALSE(message.empty()) << "a file cut to " << n << " bytes opened";
    ASSERT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(GgufReader, CraftedFileOpens) {
  auto f = GgufFile::open(write(Crafted{}.bytes()));
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->tensors()[0].shape, (std::vector<int64_t>{2, 4}));
}

TEST_F(GgufReader, RefusesBrokenHeaders) {
  std::string bad_magic = Crafted{}.bytes();
  bad_magic[0] = 'X';
  expect_error(bad_magic, "not a GGUF file");
  Crafted v1;
  v1.version = 1;
  expect_error(v1.bytes(), "version 1 is not supported");
  Crafted v9;
  v9.version = 9;
  expect_error(v9.bytes(), "version 9 is not supported");
  Crafted many_kv;
  many_kv.n_kv = uint64_t{1} << 60;
  expect_error(many_kv.bytes(), "metadata entries");
  Crafted many_tensors;
  many_tensors.n_tensors = uint64_t{1} << 60;
  expect_error(many_tensors.bytes(), "tensors but the file has");
  expect_error("GGUF", "too short");
}

TEST_F(GgufReader, RefusesBrokenMetadata) {
  Crafted long_key;
  long_key.kv = le<uint64_t>(uint64_t{1} << 62) + "k";
  expect_error(long_key.bytes(), "truncated");
  Crafted unknown;
  unknown.kv = gguf_string("k") + le<uint32_t>(13) + le<uint32_t>(0);
  expect_error(unknown.bytes(), "unknown value type 13");
  Crafted bad_bool;
  bad_bool.kv = gguf_string("k") + le<uint32_t>(7) + std::string(1, '\x02');
  expect_error(bad_bool.bytes(), "expected 0 or 1");
  Crafted huge_array;
  huge_array.kv = gguf_string("k") + le<uint32_t>(9) + le<uint32_t>(8) + le<uint64_t>(uint64_t{1} << 40);
  expect_error(huge_array.bytes(), "claims 1099511627776 elements");
  Crafted deep;
  deep.kv = gguf_string("k") + le<uint32_t>(9);
  for (int i = 0; i < 12; ++i) deep.kv += le<uint32_t>(9) + le<uint64_t>(1);
  deep.kv += le<uint32_t>(0) + le<uint64_t>(0);
  expect_error(deep.bytes(), "nests arrays");
  Crafted twice;
  twice.n_kv = 2;
  twice.kv += twice.kv;
  expect_error(twice.bytes(), "appears twice");
  Crafted alignment;
  alignment.kv = gguf_string("general.alignment") + le<uint32_t>(4) + le<uint32_t>(48);
  expect_error(alignment.bytes(), "power of two");
}

TEST_F(GgufReader, RefusesBrokenTensorInfos) {
  Crafted dims;
  dims.n_dims = 5;
  dims.ne = {1, 1, 1, 1, 8};
  expect_error(dims.bytes(), "5 dimensions");
  Crafted type;
  type.type = 4;  // Q4_2, removed from ggml
  expect_error(type.bytes(), "unknown ggml type 4");
  Crafted blocks;
  blocks.type = 8;  // Q8_0: 4 values are not a block of 32
  expect_error(blocks.bytes(), "do not divide");
  Crafted overflow;
  overflow.ne = {uint64_t{1} << 40, uint64_t{1} << 40};
  expect_error(overflow.bytes(), "overflows");
  Crafted empty_overflow;  // found by fuzz_gguf: a zero dimension hid the overflow of the others
  empty_overflow.n_dims = 3;
  empty_overflow.ne = {0, uint64_t{1} << 40, uint64_t{1} << 40};
  expect_error(empty_overflow.bytes(), "overflows");
  Crafted wide_empty;  // also fuzz_gguf's: no elements, but a row of 2^62 F32 values
  wide_empty.ne = {uint64_t{1} << 62, 0};
  expect_error(wide_empty.bytes(), "rows overflow");
  Crafted misaligned;
  misaligned.offset = 4;
  expect_error(misaligned.bytes(), "not a multiple of the alignment");
  Crafted past_end;
  past_end.offset = 32;
  expect_error(past_end.bytes(), "runs past the end");
  Crafted short_data;
  short_data.data_bytes = 31;
  expect_error(short_data.bytes(), "runs past the end");
  Crafted duplicate;
  duplicate.n_tensors = 2;
  duplicate.extra_info = gguf_string("w") + le<uint32_t>(1) + le<uint64_t>(4) + le<uint32_t>(0) + le<uint64_t>(0);
  expect_error(duplicate.bytes(), "appears twice");
  Crafted overlap;
  overlap.n_tensors = 2;
  overlap.extra_info = gguf_string("v") + le<uint32_t>(1) + le<uint64_t>(4) + le<uint32_t>(0) + le<uint64_t>(0);
  expect_error(overlap.bytes(), "overlap");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::io

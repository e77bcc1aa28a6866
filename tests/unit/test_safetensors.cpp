// The safetensors reader against files crafted byte by byte, one broken rule each, and
// against a file written by the reference python writer (tools/fixtures/make_safetensors.py).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace dpinfer::io {
namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

/// A safetensors file: the length of `header`, `header`, then `data`.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

class Safetensors : public ::testing::Test {
 protected:
  std::string write(const std::string& bytes, const std::string& name = "model.safetensors") {
    const std::string path = dir_.file(name);
    test::write_file(path, bytes);
    return path;
  }

  /// The message open() throws for `bytes`, or "" when it opens.
  std::string error_of(const std::string& bytes) {
    const std::string path = write(bytes);
    try {
      SafetensorsFile::open(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  void expect_error(const std::string& bytes, const std::string& part) {
    const std::string message = error_of(bytes);
    EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
    EXPECT_NE(message.find("'" + dir_.file("model.safetensors") + "'"), std::string::npos)
        << "message does not name the file: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
  }

  test::TempDir dir_;
};

std::string floats(const std::vector<float>& values) {
  std::string s(values.size() * 4, '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

TEST_F(Safetensors, OpensAValidFile) {
  const std::string header = R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("__metadata__":{"format":"pt","note":"x"}})";
  std::string data = floats({1, 2, 3, 4, 5, 6}) + std::string("\x00\x3c\x00\x40", 4);
  const std::string path = write(file_bytes(header, data));
  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->path(), path);
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->tensors()[0].name, "a");  // data order
  EXPECT_EQ(file->tensors()[1].name, "b");
  const TensorView* a = file->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, Dtype::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->numel(), 6);
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(a->offset, 8 + header.size());
  float third;
  std::memcpy(&third, a->data + 8, 4);
  EXPECT_EQ(third, 3.0f);
  const TensorView* b = file->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, Dtype::kF16);
  EXPECT_EQ(std::to_integer<int>(b->data[1]), 0x3c);
  EXPECT_EQ(file->find("c"), nullptr);
  EXPECT_EQ(file->find("__metadata__"), nullptr);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("note"), "x");
  EXPECT_EQ(file->file_size(), 8 + header.size() + data.size());
}

TEST_F(Safetensors, AllowsZeroDimAndEmptyTensorsAndNoTensors) {
  const std::string header = R"({"scalar":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                             R"("empty":{"dtype":"BF16","shape":[0,3],"data_offsets":[4,4]},)"
                             R"("none":{"dtype":"I64","shape":[5,0],"data_offsets":[4,4]}})";
  auto file = SafetensorsFile::open(write(file_bytes(header, floats({7}))));
  const TensorView* scalar = file->find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(file->find("empty")->nbytes, 0u);
  EXPECT_EQ(file->find("none")->numel(), 0);
  EXPECT_TRUE(file->metadata().empty());

  auto no_tensors = SafetensorsFile::open(write(file_bytes("{}        "), "empty.safetensors"));
  EXPECT_TRUE(no_tensors->tensors().empty());
}

TEST_F(Safetensors, KnowsEveryReferenceDtype) {
  const std::vector<std::pair<std::string, int>> dtypes{
      {"BOOL", 1},    {"U8", 1},          {"I8", 1},          {"I16", 2},    {"U16", 2},
      {"F16", 2},     {"BF16", 2},        {"I32", 4},         {"U32", 4},    {"F32", 4},
      {"F64", 8},     {"I64", 8},         {"U64", 8},         {"C64", 8},    {"F8_E4M3", 1},
      {"F8_E5M2", 1}, {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1}, {"F8_E8M0", 1}};
  for (const auto& [name, size] : dtypes) {
    const std::string header = R"({"t":{"dtype":")" + name + R"(","shape":[2],"data_offsets":[0,)" +
                               std::to_string(2 * size) + "]}}";
    auto file = SafetensorsFile::open(write(file_bytes(header, std::string(2 * size, '\0'))));
    EXPECT_EQ(dtype_name(file->find("t")->dtype), name);
    EXPECT_EQ(dtype_bits(file->find("t")->dtype), 8 * size);
  }
  // Sub-byte types: 4 F4 values are 2 bytes.
  auto f4 = SafetensorsFile::open(
      write(file_bytes(R"({"t":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", "ab")));
  EXPECT_EQ(f4->find("t")->nbytes, 2u);
}

TEST_F(Safetensors, ReadsTheReferenceWritersFile) {
  auto file = SafetensorsFile::open(DPINFER_TEST_DATA_DIR "/safetensors/reference.safetensors");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("written_by"), "safetensors.torch.save_file");
  ASSERT_EQ(file->tensors().size(), 7u);

  // (arange(n) - n // 2 + len(name)) / 8, as the generator writes.
  const TensorView* f32 = file->find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dtype, Dtype::kF32);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) {
    float v;
    std::memcpy(&v, f32->data + 4 * i, 4);
    EXPECT_EQ(v, (i - 3 + 3) / 8.0f) << i;
  }
  const TensorView* f16 = file->find("f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->dtype, Dtype::kF16);
  // (0-1+3)/8 = 0.25 -> 0x3400, 0.375 -> 0x3600, 0.5 -> 0x3800
  const uint16_t want16[] = {0x3400, 0x3600, 0x3800};
  for (int i = 0; i < 3; ++i) {
    uint16_t bits;
    std::memcpy(&bits, f16->data + 2 * i, 2);
    EXPECT_EQ(bits, want16[i]) << i;
  }
  const TensorView* bf16 = file->find("bf16");
  ASSERT_NE(bf16, nullptr);
  // (0-1+4)/8 = 0.375 -> 0x3ec0, 0.5 -> 0x3f00
  uint16_t bits[2];
  std::memcpy(bits, bf16->data, 4);
  EXPECT_EQ(bits[0], 0x3ec0);
  EXPECT_EQ(bits[1], 0x3f00);
  const TensorView* i64 = file->find("i64");
  int64_t ints[4];
  std::memcpy(ints, i64->data, 32);
  EXPECT_EQ(ints[3], -4);
  const TensorView* flags = file->find("flags");
  EXPECT_EQ(flags->dtype, Dtype::kBool);
  EXPECT_EQ(std::to_integer<int>(flags->data[0]), 1);
  EXPECT_EQ(std::to_integer<int>(flags->data[1]), 0);
  EXPECT_TRUE(file->find("scalar")->shape.empty());
  EXPECT_EQ(file->find("empty")->nbytes, 0u);
  // The reference writer pads its header so the data starts 8-byte aligned.
  EXPECT_EQ(file->tensors()[0].offset % 8, 0u);
}

TEST_F(Safetensors, RefusesAnEmptyFile) {
  expect_error("", "file is 0 bytes, too short");
}

TEST_F(Safetensors, RefusesATruncatedHeaderLength) {
  expect_error(std::string("\x10\x00\x00", 3), "file is 3 bytes, too short");
}

TEST_F(Safetensors, RefusesAHeaderPastTheEnd) {
  expect_error(le64(100) + R"({"a":1})", "header length 100 runs past the end of the file (15 bytes)");
}

TEST_F(Safetensors, RefusesAHugeHeaderLength) {
  expect_error(le64(100'000'001) + "{}", "header length 100000001 is over the 100000000-byte limit");
  expect_error(le64(UINT64_MAX) + "{}", "is over the 100000000-byte limit");
}

TEST_F(Safetensors, RefusesBadJson) {
  expect_error(file_bytes(R"({"a":{"dtype":"F32",)"), "header is not valid json");
  expect_error(file_bytes(""), "header is not valid json");
}

TEST_F(Safetensors, RefusesInvalidUtf8) {
  expect_error(file_bytes("{\"a\xff\":{}}"), "header is not valid utf-8 (byte 3 of the header)");
  expect_error(file_bytes("{\"\xc0\xaf\":{}}"), "not valid utf-8");      // overlong '/'
  expect_error(file_bytes("{\"\xed\xa0\x80\":{}}"), "not valid utf-8");  // a surrogate
}

TEST_F(Safetensors, RefusesAHeaderThatIsNotAnObject) {
  expect_error(file_bytes("[1,2]"), "header is a json array, expected an object");
  expect_error(file_bytes("\"x\""), "header is a json string, expected an object");
}

TEST_F(Safetensors, RefusesAnEntryThatIsNotAnObject) {
  expect_error(file_bytes(R"({"a":3})"), "tensor 'a' is described by a json number");
}

TEST_F(Safetensors, RefusesAnUnknownOrMissingDtype) {
  expect_error(file_bytes(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", "x"),
               "tensor 'a' has unknown dtype \"Q4\" (known: BOOL, U8");
  expect_error(file_bytes(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
               "unknown dtype \"f32\"");
  expect_error(file_bytes(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has no dtype");
  expect_error(file_bytes(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has no dtype");
}

TEST_F(Safetensors, RefusesBadShapes) {
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has a negative dimension in shape [2,-3]");
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has shape [2.5], expected a list of non-negative integers");
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has no shape list");
  expect_error(file_bytes(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has no shape list");
}

TEST_F(Safetensors, RefusesShapesWhoseSizeOverflows) {
  expect_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                 "xxxx"),
      "tensor 'a' has shape [4294967296,4294967296] whose size overflows 64 bits");
  expect_error(
      file_bytes(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})", "xxxx"),
      "whose size overflows 64 bits");
  expect_error(
      file_bytes(R"({"a":{"dtype":"U8","shape":[9223372036854775808,0],"data_offsets":[0,0]}})"),
      "whose size overflows 64 bits");
  // Bigger than any integer: json reads it as a float.
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,0]}})"),
               "expected a list of non-negative integers");
}

TEST_F(Safetensors, RefusesSubByteShapesThatAreNotWholeBytes) {
  expect_error(file_bytes(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "xx"),
               "tensor 'a' has shape [3] of F4, which is not a whole number of bytes");
}

TEST_F(Safetensors, RefusesAWrongByteCount) {
  const std::string header =
      R"({"conv_in.weight":{"dtype":"F32","shape":[320,4,3,3],"data_offsets":[0,46076]}})";
  expect_error(file_bytes(header, std::string(46076, '\0')),
               "tensor 'conv_in.weight' has shape [320,4,3,3] (46080 bytes as F32) but data_offsets "
               "span 46076 bytes; the file is corrupt or truncated, re-download it");
}

TEST_F(Safetensors, RefusesBadDataOffsets) {
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"),
               "tensor 'a' has data_offsets [0], expected [begin, end]");
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"),
               "expected [begin, end] with two non-negative integers");
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[1]}})", "x"),
               "tensor 'a' has data_offsets missing");
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", "xxxx"),
               "tensor 'a' has data_offsets [4,2] that end before they begin");
}

TEST_F(Safetensors, RefusesOffsetsPastTheData) {
  expect_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678"),
      "tensor 'a' has data_offsets [0,16] past the end of the data (8 bytes); the file is truncated");
  expect_error(
      file_bytes(
          R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})"),
      "past the end of the data (0 bytes)");
}

TEST_F(Safetensors, RefusesOverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  expect_error(file_bytes(header, std::string(24, '\0')), "tensors 'a' [0,16] and 'b' [8,24] overlap");
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  expect_error(file_bytes(same, std::string(8, '\0')), "tensors 'a' [0,8] and 'b' [0,8] overlap");
}

TEST_F(Safetensors, RefusesGapsAndTrailingBytes) {
  const std::string gap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_error(file_bytes(gap, std::string(20, '\0')),
               "tensor 'b' starts at byte 12 of the data but the previous tensor 'a' ends at 8");
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", "xxxx"),
               "tensor 'a' starts at byte 2 of the data but the first tensor must start at 0");
  expect_error(file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "xxxx"),
               "the data area is 4 bytes but the tensors end at byte 2");
}

TEST_F(Safetensors, RefusesBadMetadata) {
  expect_error(file_bytes(R"({"__metadata__":{"format":1}})"),
               "__metadata__ entry 'format' is a json number, expected a string");
  expect_error(file_bytes(R"({"__metadata__":"pt"})"),
               "__metadata__ is a json string, expected an object");
}

TEST_F(Safetensors, RefusesWhatIsNotAFile) {
  const std::string missing = dir_.file("nope.safetensors");
  try {
    SafetensorsFile::open(missing);
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + missing + "': cannot open: No such file"),
              std::string::npos)
        << e.what();
  }
  try {
    SafetensorsFile::open(dir_.path());
    ADD_FAILURE() << "opened a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
}

// Issue 11, item 1: a shape nested 100,000 deep made the message's dump() overflow the stack.
TEST_F(Safetensors, RefusesDeepNestingInOneLine) {
  const int n = 100000;
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":)" + std::string(n, '[') + std::string(n, ']') +
                          R"(,"data_offsets":[0,4]}})", "xxxx"),
               "header is not valid json (nested deeper than 64 levels)");
  // Within the limit, the message quotes the shape briefly.
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":)" + std::string(50, '[') + std::string(50, ']') +
                          R"(,"data_offsets":[0,4]}})", "xxxx"),
               "tensor 'a' has shape [[[[[[[[[...]]]]]]]]], expected a list of non-negative integers");
}

// Issue 11, item 2: nlohmann's out_of_range escaped as exit 1 and a raw message.
TEST_F(Safetensors, RefusesNumbersOutOfRangeNamingTheFile) {
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", "xxxx"),
               "header is not valid json (number overflow parsing '1e999'); the file is corrupt");
  expect_error(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,-1e999]}})", "xxxx"),
               "header is not valid json (number overflow parsing '-1e999')");
}

// Issue 11, item 10: the first of two entries was dropped, and its bytes reported as a gap.
TEST_F(Safetensors, ADuplicateTensorIsNamedNotCalledAGap) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})";
  expect_error(file_bytes(header, std::string(24, '\0')),
               "tensor 'a' appears twice in the header; the file is corrupt, re-download it");
  expect_error(file_bytes(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
               "header gives the key 'dtype' twice in one object");
}

// Issue 11, item 5: a tensor name can hold any UTF-8, ESC and newlines included.
TEST_F(Safetensors, EscapesAndBoundsTensorNamesInMessages) {
  const std::string evil = "\\u001b]0;pwned\\u0007\\u001b[2J\\nname";  // JSON escapes
  const std::string message =
      error_of(file_bytes(R"({")" + evil + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", "xxxxxxxx"));
  EXPECT_NE(message.find("tensor '\\x1B]0;pwned\\x07\\x1B[2J\\nname' has shape [1]"), std::string::npos) << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
  const std::string long_name(5'000'000, 'n');
  const std::string long_message =
      error_of(file_bytes(R"({")" + long_name + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", "xxxxxxxx"));
  EXPECT_LT(long_message.size(), 500u) << long_message.size();
  EXPECT_NE(error_of(file_bytes(R"({"__metadata__":{"\u2028":1}})")).find("entry '\\u2028' is a json number"),
            std::string::npos);
}

// Issue 11, item 10: a link to itself is a loop, not a missing file.
TEST_F(Safetensors, ASelfLoopingLinkIsNamedAsOne) {
  const std::string loop = dir_.file("loop.safetensors");
  ASSERT_EQ(::symlink("loop.safetensors", loop.c_str()), 0);
  try {
    SafetensorsFile::open(loop);
    ADD_FAILURE() << "opened a loop";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "'" + loop + "': cannot open: a loop of symbolic links; check the path, or "
                                                  "re-download the model");
  }
}

TEST_F(Safetensors, KeepsTheMappingAliveWhileShared) {
  auto file = SafetensorsFile::open(
      write(file_bytes(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", "xyz")));
  std::weak_ptr<const SafetensorsFile> weak = file;
  const TensorView* a = file->find("a");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->data), 3), "xyz");
  file.reset();
  EXPECT_TRUE(weak.expired());
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
}  // namespace dpinfer::io

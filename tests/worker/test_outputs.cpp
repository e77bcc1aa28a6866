// The output files on their own: PNG + metadata (read back with libpng), prompt
// files, manifests and atomic writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/jpeg_writer.h"
#include "dpinfer/io/webp_writer.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/io/png_writer.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/util/error.h"
#include "support/jpeg_reader.h"
#include "support/png_reader.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
std::string error_of(const std::string& content, bool jsonl) {
  try {
    io::parse_prompts(content, "p.jsonl", jsonl);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PngWriter, PixelsAndTextChunksRoundTripThroughLibpng) {
  TempDir dir;
  const int w = 5, h = 3;
  std::vector<uint8_t> rgb(w * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7);
  std::string latin = "a caf\xC3\xA9 at dusk\nSteps: 20";      // é is Latin-1: tEXt
  std::string utf8 = "\xE5\xAF\x8C\xE5\xA3\xAB\xE5\xB1\xB1 \xF0\x9F\x97\xBB";  // 富士山 🗻: iTXt
  io::write_file_atomically(dir.file("a.png"), io::encode_png(rgb.data(), w, h, {{"parameters", latin}, {"dpinfer", "{}", true}}));
  io::write_file_atomically(dir.file("b.png"), io::encode_png(rgb.data(), w, h, {{"parameters", utf8}}));
  DecodedPng a = read_png(dir.file("a.png"));
  EXPECT_EQ(a.width, w);
  EXPECT_EQ(a.height, h);
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.bit_depth, 8);
  EXPECT_EQ(a.pixels, rgb);
  EXPECT_EQ(a.texts["parameters"], latin);
  EXPECT_FALSE(a.text_is_itxt["parameters"]);
  EXPECT_TRUE(a.text_is_itxt["dpinfer"]);
  DecodedPng b = read_png(dir.file("b.png"));
  EXPECT_EQ(b.texts["parameters"], utf8);
  EXPECT_TRUE(b.text_is_itxt["parameters"]);
}

TEST(PngWriter, Crc32MatchesTheStandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(io::png_crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xCBF43926u);
}

TEST(PngWriter, RejectsBadKeywordsAndSizes) {
  std::vector<uint8_t> px(3);
  EXPECT_THROW(io::encode_png(px.data(), 1, 1, {{"", "x"}}), Error);
  EXPECT_THROW(io::encode_png(px.data(), 0, 1, {}), Error);
  EXPECT_THROW(io::encode_png(px.data(), 1, 1, {{"k", "\xFF"}}), Error);
}

// --image-format jpeg: pixels within JPEG's loss, AUTOMATIC1111's infotext in Exif's UserComment
// (UTF-16BE, surrogate pairs included) and the record in COM, after the JFIF APP0.
TEST(JpegWriter, PixelsInfotextAndRecordRoundTrip) {
  TempDir dir;
  const int w = 48, h = 32;
  std::vector<uint8_t> rgb(w * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {  // smooth gradients, as images are: JPEG's loss stays small
      uint8_t* p = &rgb[(y * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 5);
      p[1] = static_cast<uint8_t>(y * 7);
      p[2] = static_cast<uint8_t>(128 + (x - y));
    }
  const std::string infotext = "a caf\xC3\xA9, \xE5\xAF\x8C\xE5\xA3\xAB\xE5\xB1\xB1 \xF0\x9F\x97\xBB\nSteps: 20, Seed: 7";
  const std::string record = "{\"prompt\":\"\xF0\x9F\x90\xB1\"}";
  io::EncodedJpeg jpeg = io::encode_jpeg(rgb.data(), w, h, 95, {infotext, record});
  EXPECT_FALSE(jpeg.user_comment_left_out);
  EXPECT_FALSE(jpeg.comment_left_out);
  io::write_file_atomically(dir.file("a.jpg"), jpeg.bytes);
  DecodedJpeg a = read_jpeg(dir.file("a.jpg"));
  EXPECT_EQ(a.width, w);
  EXPECT_EQ(a.height, h);
  ASSERT_EQ(a.pixels.size(), rgb.size());
  double sum = 0;
  int worst = 0;
  for (size_t i = 0; i < rgb.size(); ++i) {
    const int d = std::abs(int(a.pixels[i]) - int(rgb[i]));
    sum += d;
    worst = std::max(worst, d);
  }
  EXPECT_LT(sum / rgb.size(), 2.0) << "quality 95 on a gradient";
  EXPECT_LT(worst, 24);
  ASSERT_GE(a.markers.size(), 3u);
  EXPECT_EQ(a.markers[0], 0xE0) << "JFIF's APP0 first";
  EXPECT_EQ(a.markers[1], 0xE1);
  EXPECT_EQ(a.markers[2], 0xFE);
  EXPECT_EQ(a.user_comment_prefix, std::string("UNICODE\0", 8));
  EXPECT_EQ(a.user_comment, infotext);
  EXPECT_EQ(a.comment, record);

  // Lower quality: fewer bytes. No text: no segments of ours.
  io::EncodedJpeg small = io::encode_jpeg(rgb.data(), w, h, 30, {});
  EXPECT_LT(small.bytes.size(), jpeg.bytes.size() - infotext.size() * 2 - record.size());
  io::write_file_atomically(dir.file("b.jpg"), small.bytes);
  DecodedJpeg b = read_jpeg(dir.file("b.jpg"));
  EXPECT_EQ(b.user_comment, "");
  EXPECT_EQ(b.comment, "");
  for (uint8_t m : b.markers) EXPECT_TRUE(m != 0xE1 && m != 0xFE) << int(m);
}

TEST(JpegWriter, TextsTooLongForASegmentAreLeftOutAndSaid) {
  std::vector<uint8_t> px(8 * 8 * 3, 100);
  const std::string long_text(40000, 'x');  // 80,008 bytes as UTF-16: over APP1's 65,533
  io::EncodedJpeg j = io::encode_jpeg(px.data(), 8, 8, 90, {long_text, "{}"});
  EXPECT_TRUE(j.user_comment_left_out);
  EXPECT_FALSE(j.comment_left_out);
  io::EncodedJpeg k = io::encode_jpeg(px.data(), 8, 8, 90, {"ok", std::string(70000, 'y')});
  EXPECT_FALSE(k.user_comment_left_out);
  EXPECT_TRUE(k.comment_left_out);
  TempDir dir;
  io::write_file_atomically(dir.file("k.jpg"), k.bytes);
  DecodedJpeg d = read_jpeg(dir.file("k.jpg"));
  EXPECT_EQ(d.user_comment, "ok");
  EXPECT_EQ(d.comment, "");
}

TEST(WebpWriter, RejectsBadSizesQualitiesAndText) {
  std::vector<uint8_t> px(16384 * 3, 7);
  EXPECT_THROW(io::encode_webp(px.data(), 0, 1, 90, false, {}), Error);
  EXPECT_THROW(io::encode_webp(px.data(), 16384, 1, 90, false, {}), Error);  // WebP's side is at most 16383
  EXPECT_THROW(io::encode_webp(px.data(), 1, 1, 101, false, {}), Error);
  EXPECT_THROW(io::encode_webp(px.data(), 1, 1, 90, false, {"\xFF", ""}), Error);
  // A plain file without text; an extended one (VP8X) with EXIF and XMP chunks with it.
  const std::string plain = io::encode_webp(px.data(), 4, 4, 90, true, {});
  EXPECT_EQ(plain.substr(0, 4), "RIFF");
  EXPECT_EQ(plain.substr(8, 4), "WEBP");
  EXPECT_EQ(plain.find("EXIF"), std::string::npos);
  const std::string full = io::encode_webp(px.data(), 4, 4, 90, true, {"Steps: 1", "{\"a\":\"<&>\"}"});
  EXPECT_EQ(full.substr(12, 4), "VP8X");
  EXPECT_NE(full.find("EXIF"), std::string::npos);
  EXPECT_NE(full.find("XMP "), std::string::npos);
  EXPECT_NE(full.find("<dpinfer:record>{&quot;a&quot;:&quot;&lt;&amp;&gt;&quot;}</dpinfer:record>"), std::string::npos);
}

TEST(JpegWriter, RejectsBadSizesQualitiesAndText) {
  std::vector<uint8_t> px(3);
  EXPECT_THROW(io::encode_jpeg(px.data(), 0, 1, 90, {}), Error);
  EXPECT_THROW(io::encode_jpeg(px.data(), 1, 1, 0, {}), Error);
  EXPECT_THROW(io::encode_jpeg(px.data(), 1, 1, 101, {}), Error);
  EXPECT_THROW(io::encode_jpeg(px.data(), 1, 1, 90, {"\xFF", ""}), Error);
}

TEST(PromptFile, TextAcceptsCrlfBomAndSkipsBlankLines) {
  auto specs = io::parse_prompts("\xEF\xBB\xBF" "first\r\n\r\n  \nsecond line\n\nthird", "p.txt", false);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].prompt, "first");
  EXPECT_EQ(specs[1].prompt, "second line");
  EXPECT_EQ(specs[1].line, 4);
  EXPECT_EQ(specs[2].line, 6);
}

TEST(PromptFile, JsonlReadsEveryKey) {
  auto specs = io::parse_prompts(
      R"({"prompt": "fox", "negative_prompt": "blur", "seed": 7, "steps": 20, "guidance_scale": 5.5, "width": 64, "height": 32, "num_images": 3, "id": "a1"})"
      "\n{\"prompt\": \"owl\"}\n",
      "p.jsonl", true);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(*specs[0].negative_prompt, "blur");
  EXPECT_EQ(*specs[0].seed, 7);
  EXPECT_EQ(*specs[0].steps, 20);
  EXPECT_DOUBLE_EQ(*specs[0].guidance_scale, 5.5);
  EXPECT_EQ(*specs[0].width, 64);
  EXPECT_EQ(*specs[0].height, 32);
  EXPECT_EQ(specs[0].num_images, 3);
  EXPECT_EQ(*specs[0].id, "a1");
  EXPECT_FALSE(specs[1].seed.has_value());
}

TEST(PromptFile, ErrorsNameTheFileLineAndProblem) {
  EXPECT_EQ(error_of("{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"sed\": 1}\n", true),
            "'p.jsonl' line 2: unknown key 'sed'; allowed: prompt, negative_prompt, seed, steps, guidance_scale, "
            "width, height, num_images, id, image, strength, mask, settings, loras (--keep-fields keeps unknown keys)");
  EXPECT_NE(error_of("{\"prompt\": \"a\"\n", true).find("'p.jsonl' line 1: invalid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]\n", true).find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"negative_prompt\": \"x\"}\n", true).find("missing the required key 'prompt'"), std::string::npos);
  EXPECT_NE(error_of("{\"prompt\": \"a\", \"steps\": \"20\"}\n", true).find("'steps' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("{\"prompt\": \"a\", \"num_images\": 0}\n", true).find("'num_images' must be in 1.."),
            std::string::npos);
  EXPECT_EQ(error_of("ok\nbad \xC3\x28 byte\n", false),
            "'p.jsonl' line 2: invalid UTF-8 at byte 5 of the line; save the file as UTF-8");
}

TEST(PromptFile, MissingFileIsAClearError) {
  try {
    io::read_prompt_file("/nonexistent/prompts.txt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/prompts.txt'"), std::string::npos);
  }
}

TEST(Manifest, MergeSortsByIndexKeepsTheLatestAndSplitsFailures) {
  TempDir dir;
  for (const char* f : {"000000.png", "000001.png", "000003.png"}) write_file(dir.file(f), "png");
  {
    io::ManifestWriter r0(dir.file("manifest.rank0.jsonl"));
    r0.append({{"index", 3}, {"file_name", "000003.png"}, {"status", "ok"}, {"finished_at", 5.0}});
    r0.append({{"index", 0}, {"file_name", "000000.png"}, {"status", "ok"}, {"finished_at", 1.0}});
    io::ManifestWriter r1(dir.file("manifest.rank1.jsonl"));
    r1.append({{"index", 2}, {"status", "error"}, {"error", "boom"}, {"finished_at", 2.0}});
    r1.append({{"index", 1}, {"status", "error"}, {"error", "first try"}, {"finished_at", 1.0}});
    r1.append({{"index", 1}, {"file_name", "000001.png"}, {"status", "ok"}, {"finished_at", 9.0}});
  }
  write_file(dir.file("manifest.rank2.jsonl"), "{\"index\": 4, \"stat");  // torn by a kill
  io::MergeResult m = io::merge_manifests(dir.path());
  EXPECT_EQ(m.ok, 3u);
  EXPECT_EQ(m.failed, 1u);
  EXPECT_EQ(m.torn_lines, 1u);
  std::vector<int> order;
  std::istringstream meta(read_file(dir.file("metadata.jsonl")));
  for (std::string line; std::getline(meta, line);) {
    auto j = nlohmann::json::parse(line);
    order.push_back(j["index"].get<int>());
    EXPECT_EQ(j["status"], "ok");
    EXPECT_FALSE(j.contains("finished_at"));
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 3}));
  auto failure = nlohmann::json::parse(read_file(dir.file("failures.jsonl")));
  EXPECT_EQ(failure["index"], 2);
  EXPECT_EQ(failure["error"], "boom");
}

TEST(AtomicFile, WritesInPlaceAndCleansOnlyStaleTemporaries) {
  TempDir dir;
  io::write_file_atomically(dir.file("x.png"), "data");
  EXPECT_EQ(read_file(dir.file("x.png")), "data");
  // A temporary of a dead writer on this host, and one of a live writer (us).
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string h(host);
  for (char& c : h)
    if (c == '.') c = '_';
  std::string dead = dir.file(".y.png." + h + ".999999999.dpinfer-tmp");
  std::string live = dir.file(".z.png." + h + "." + std::to_string(::getpid()) + ".dpinfer-tmp");
  write_file(dead, "partial");
  write_file(live, "partial");
  EXPECT_EQ(io::remove_stale_temporaries(dir.path()), 1u);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(dir.file("x.png")));
}

// --files-per-dir: the subdirectories are made once each, and their stale temporaries go
// with those of the root, but only in the directories the caller names.
TEST(AtomicFile, SubdirectoriesAreMadeOnceAndSearchedForStaleTemporariesOnlyWhenAsked) {
  TempDir dir;
  io::SubdirectoryMaker maker(dir.path());
  maker.ensure("00000");
  io::write_file_atomically(dir.file("00000/000000.png"), "a");
  EXPECT_EQ(read_file(dir.file("00000/000000.png")), "a");
  std::filesystem::remove_all(dir.file("00000"));
  maker.ensure("00000");  // remembered: no second mkdir
  EXPECT_FALSE(std::filesystem::exists(dir.file("00000")));
  std::filesystem::create_directory(dir.file("00001"));
  io::SubdirectoryMaker other(dir.path());
  other.ensure("00001");  // another rank's, or an earlier run's: taken as it is
  write_file(dir.file("00002"), "a file");
  try {
    other.ensure("00002");
    ADD_FAILURE() << "a file in the way";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("00002': a file of that name is in the way; move it"), std::string::npos)
        << e.what();
  }

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string h(host);
  for (char& c : h)
    if (c == '.') c = '_';
  const std::string tmp = "." + std::string("000003.png.") + h + ".999999999.dpinfer-tmp";
  std::filesystem::create_directory(dir.file("user"));
  for (const char* sub : {"00001", "user"}) write_file(dir.file(std::string(sub) + "/" + tmp), "partial");
  EXPECT_EQ(io::remove_stale_temporaries(dir.path()), 0u) << "the root only";
  EXPECT_EQ(io::remove_stale_temporaries(dir.path(), [](const std::string& name) { return name == "00001"; }), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("00001/" + tmp)));
  EXPECT_TRUE(std::filesystem::exists(dir.file("user/" + tmp))) << "a tree of the user's";
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

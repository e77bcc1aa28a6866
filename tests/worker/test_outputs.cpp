// The output files on their own: PNG + metadata (read back with libpng), prompt
// files, manifests and atomic writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/io/png_writer.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/util/error.h"
#include "support/png_reader.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
std::string error_of(const std::string& content, bool jsonl) {
  try {
    io::parse_prompts(content, "p.jsonl", jsonl);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

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
            "width, height, num_images, id, settings, loras");
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

// Prompt files (io/prompt_file.h) against hostile input: deep JSON, huge values,
// terminal escapes, numbers past int64, comments, and links that loop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "dpinfer/io/prompt_file.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string error_of(const std::string& content, bool jsonl = true) {
  try {
    io::parse_prompts(content, "p.jsonl", jsonl);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> prompts_of(const std::string& txt) {
  std::vector<std::string> out;
  for (const io::PromptSpec& s : io::parse_prompts(txt, "p.txt", false)) out.push_back(s.prompt);
  return out;
}


// Issue 11, item 1: 100,000 nested arrays made the message's dump() overflow the stack.
TEST(PromptFileHardening, DeeplyNestedJsonIsOneLineNotACrash) {
  const int n = 100000;
  const std::string deep = std::string(n, '[') + std::string(n, ']');
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"steps\":" + deep + "}\n"),
            "'p.jsonl' line 1: invalid JSON (nested deeper than 64 levels); each line must be one object such as "
            "{\"prompt\": \"a red fox\"}");
  EXPECT_NE(error_of(deep + "\n").find("nested deeper than 64 levels"), std::string::npos);
  // Nesting within the limit reaches the value checks, whose message quotes it briefly.
  const std::string nested = std::string(60, '[') + std::string(60, ']');
  const std::string why = error_of("{\"prompt\":\"a\",\"steps\":" + nested + "}\n");
  EXPECT_NE(why.find("'steps' must be an integer, got [[[[[[[[[...]]]]]]]]]"), std::string::npos) << why;
}

// Issue 11, item 3: 2^63 made get_integer compute max + 1, a signed overflow (UBSan).
TEST(PromptFileHardening, IntegersPastInt64AreOutOfRange) {
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"seed\":9223372036854775808}\n"),
            "'p.jsonl' line 1: 'seed' must be in 0..9223372036854775807, got 9223372036854775808");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"seed\":18446744073709551615}\n"),
            "'p.jsonl' line 1: 'seed' must be in 0..9223372036854775807, got 18446744073709551615");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"steps\":4294967296}\n"),
            "'p.jsonl' line 1: 'steps' must be in 1..10000, got 4294967296");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"width\":-9223372036854775808}\n"),
            "'p.jsonl' line 1: 'width' must be in 8..16384, got -9223372036854775808");
  auto specs = io::parse_prompts("{\"prompt\":\"a\",\"seed\":9223372036854775807}\n", "p.jsonl", true);
  EXPECT_EQ(*specs[0].seed, INT64_MAX);
}

// Issue 11, item 2, on this path: a number past double's range.
TEST(PromptFileHardening, NumberOverflowIsInvalidJson) {
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"guidance_scale\":1e999}\n"),
            "'p.jsonl' line 1: invalid JSON (number overflow parsing '1e999'); each line must be one object such as "
            "{\"prompt\": \"a red fox\"}");
}

// Issue 11, item 5: keys and values reach the message escaped and cut short.
TEST(PromptFileHardening, KeysAndValuesAreEscapedAndBounded) {
  const std::string key_error = error_of("{\"prompt\":\"a\",\"\\u001b]0;pwned\\u0007\\nx\":1}\n");
  EXPECT_EQ(key_error, "'p.jsonl' line 1: unknown key '\\x1B]0;pwned\\x07\\nx'; allowed: prompt, negative_prompt, seed, "
                       "steps, guidance_scale, width, height, num_images, id, image, strength, mask, settings, loras "
                       "(--keep-fields keeps unknown keys)");
  const std::string huge = "{\"prompt\":\"a\",\"steps\":\"" + std::string(5'000'000, 'x') + "\\u001b[2J\"}\n";
  const std::string value_error = error_of(huge);
  EXPECT_LT(value_error.size(), 200u) << value_error.size();
  EXPECT_NE(value_error.find("'steps' must be an integer, got \"xxx"), std::string::npos) << value_error;
  const std::string long_key = error_of("{\"prompt\":\"a\",\"" + std::string(1'000'000, 'k') + "\":1}\n");
  // The quoted key is cut short; the rest is the line number and the list of allowed keys.
  EXPECT_LT(long_key.size(), 300u) << long_key.size();
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"prompt\\u2028\":1}\n").find('\xE2'), std::string::npos);
  // The file's name too.
  try {
    io::parse_prompts("[1]\n", "evil\x1b[2J\n.jsonl", true);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("'evil\\x1B[2J\\n.jsonl' line 1: expected a JSON object", 0), 0u) << e.what();
  }
}

// Issue 11, item 19: # comments in .txt, and \# for a prompt that starts with #.
TEST(PromptFileHardening, TextCommentsAndTheBackslashEscape) {
  EXPECT_EQ(prompts_of("# header\na fox\n  # indented comment\n\t#tab comment\n\\#hashtag sunset\n"
                       "\\\\#two backslashes\nno # comment here\n\\not an escape\n  \\#indented\n"),
            (std::vector<std::string>{"a fox", "#hashtag sunset", "\\#two backslashes", "no # comment here",
                                      "\\not an escape", "  #indented"}));
  auto specs = io::parse_prompts("# c\n\na\n#c2\nb\n", "p.txt", false);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].line, 3);
  EXPECT_EQ(specs[1].line, 5);
  // A comment is skipped whole: its bytes are not checked.
  EXPECT_EQ(prompts_of("# caf\xE9 in Latin-1\nok\n"), (std::vector<std::string>{"ok"}));
  EXPECT_EQ(prompts_of("#only comments\n# here\n"), (std::vector<std::string>{}));
  // JSON lines have no comments: # is invalid JSON there.
  EXPECT_NE(error_of("# c\n{\"prompt\":\"a\"}\n").find("line 1: invalid JSON"), std::string::npos);
}

// Issue 11, item 10: a link to itself is a loop, not a missing file.
TEST(PromptFileHardening, ASelfLoopingLinkIsNamedAsOne) {
  TempDir dir;
  ASSERT_EQ(::symlink("loop.txt", dir.file("loop.txt").c_str()), 0);
  ASSERT_EQ(::symlink("gone.txt", dir.file("dangling.txt").c_str()), 0);
  try {
    io::read_prompt_file(dir.file("loop.txt"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read prompts file '" + dir.file("loop.txt") + "': a loop of symbolic links");
  }
  try {
    io::read_prompt_file(dir.file("dangling.txt"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a broken symbolic link"), std::string::npos) << e.what();
  }
  try {
    io::read_prompt_file(dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no .txt file; give a folder of one prompt per .txt file"),
              std::string::npos)
        << e.what();
  }
}

TEST(PromptFileHardening, ReadsAPipe) {
  TempDir dir;
  write_file(dir.file("p.txt"), "from a pipe\n");
  // /dev/stdin-like paths (a shell's <(...)) are pipes, not regular files.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "one\ntwo\n", 8), 8);
  ::close(fds[1]);
  auto specs = io::read_prompt_file("/proc/self/fd/" + std::to_string(fds[0]));
  ::close(fds[0]);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].prompt, "two");
}

TEST(PromptFileHardening, TheSharedBoundsAreTheJsonlOnes) {
  EXPECT_EQ(io::kStepsRange.text(), "1..10000");
  EXPECT_EQ(io::kImageSizeRange.text(), "8..16384");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"steps\":10001}\n"), "'p.jsonl' line 1: 'steps' must be in 1..10000, got 10001");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"num_images\":100001}\n"),
            "'p.jsonl' line 1: 'num_images' must be in 1..100000, got 100001");
}

// FLUX.2's several references (issue 30): `image` is a path or a list of 1..16 paths, the first of which is `image`.
TEST(PromptFileImages, AnImageIsAPathOrAListOfPaths) {
  auto specs = io::parse_prompts(
      "{\"prompt\": \"a\", \"image\": \"x.png\"}\n{\"prompt\": \"b\", \"image\": [\"x.png\", \"y.png\", \"z.png\"]}\n"
      "{\"prompt\": \"c\", \"image\": [\"x.png\"]}\n{\"prompt\": \"d\"}\n",
      "p.jsonl", true);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(*specs[0].image, "x.png");
  EXPECT_TRUE(specs[0].more_images.empty());
  EXPECT_EQ(*specs[1].image, "x.png");
  EXPECT_EQ(specs[1].more_images, (std::vector<std::string>{"y.png", "z.png"}));
  EXPECT_EQ(*specs[2].image, "x.png");  // a list of one is the path
  EXPECT_TRUE(specs[2].more_images.empty());
  EXPECT_FALSE(specs[3].image);
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"image\":[]}\n"),
            "'p.jsonl' line 1: 'image' lists 0 images; expected a path, or a list of 1..16 paths");
  std::string seventeen = "[";
  for (int k = 0; k < 17; ++k) seventeen += std::string(k ? "," : "") + "\"r.png\"";
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"image\":" + seventeen + "]}\n"),
            "'p.jsonl' line 1: 'image' lists 17 images; expected a path, or a list of 1..16 paths");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"image\":[\"x.png\",3]}\n"),
            "'p.jsonl' line 1: 'image' must be a path or a list of paths, got 3");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"image\":{\"path\":\"x.png\"}}\n"),
            "'p.jsonl' line 1: 'image' must be a path or a list of paths, got {\"path\":\"x.png\"}");
  EXPECT_EQ(error_of("{\"prompt\":\"a\",\"image\":[\"x.png\",\"\"]}\n"),
            "'p.jsonl' line 1: 'image' must be a path to a PNG, JPEG or WebP file, got \"\"");
}

TEST(PromptFileLora, ALineNamesItsLorasOrRefusesThemByLine) {
  auto specs = io::parse_prompts(
      "{\"prompt\": \"a\", \"loras\": [{\"path\": \"s.safetensors\", \"scale\": 0.8}, \"t.safetensors:-1\"]}\n"
      "{\"prompt\": \"b\", \"loras\": []}\n{\"prompt\": \"c\"}\n",
      "p.jsonl", true);
  ASSERT_EQ(specs.size(), 3u);
  ASSERT_TRUE(specs[0].loras);
  EXPECT_EQ(*specs[0].loras, (io::LoraSet{{"s.safetensors", 0.8}, {"t.safetensors", -1.0}}));
  ASSERT_TRUE(specs[1].loras);
  EXPECT_TRUE(specs[1].loras->empty());
  EXPECT_FALSE(specs[2].loras);
  try {
    io::parse_prompts("{\"prompt\": \"a\"}\n{\"prompt\": \"a\", \"loras\": [{\"path\": 3}]}\n", "p.jsonl", true);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'p.jsonl' line 2: 'loras' path must be a non-empty string"), std::string::npos)
        << e.what();
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

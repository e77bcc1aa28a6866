// CSV and TSV prompts files (io/prompt_file.h, parse_prompt_table): RFC 4180 quoting as
// Python's csv module and pandas write it, the known columns, --prompt-column and
// --keep-fields, and one line naming file, line and column for each kind of bad input.
#include <gtest/gtest.h>

#include "dpinfer/io/prompt_file.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::vector<io::PromptSpec> csv(const std::string& content, io::PromptFileOptions o = {}) {
  return io::parse_prompts(content, "p.csv", io::PromptFormat::kCsv, o);
}

std::string csv_error(const std::string& content, io::PromptFileOptions o = {}) {
  try {
    csv(content, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

io::PromptFileOptions keeping(std::function<bool(const std::string&)> reserved = {}) {
  io::PromptFileOptions o;
  o.keep_fields = true;
  o.reserved_field = std::move(reserved);
  return o;
}


TEST(PromptTable, QuotedCellsHoldCommasQuotesAndNewlines) {
  // As Python's csv.writer writes them (QUOTE_MINIMAL, \r\n row ends), with a BOM.
  auto specs = csv("\xEF\xBB\xBFprompt,seed\r\n\"a red, round circle\",5\r\n\"say \"\"hi\"\"\",\r\n"
                   "\"line one\nline two\",7\r\n\r\nplain ,8\r\n");
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].prompt, "a red, round circle");
  EXPECT_EQ(specs[0].seed, 5);
  EXPECT_EQ(specs[0].line, 2);
  EXPECT_EQ(specs[1].prompt, "say \"hi\"");
  EXPECT_FALSE(specs[1].seed) << "an empty cell is unset";
  EXPECT_EQ(specs[2].prompt, "line one\nline two");
  EXPECT_EQ(specs[2].line, 4) << "a row's line is where it begins";
  EXPECT_EQ(specs[3].prompt, "plain ") << "cells keep their blanks, as Python's csv does";
  EXPECT_EQ(specs[3].line, 7);
}

// As Python's csv reads them (strict=False): a quote inside an unquoted cell is a character
// of it, and text after a closing quote continues the cell.
TEST(PromptTable, StrayQuotesAreReadAsPythonsCsvReadsThem) {
  auto specs = csv("prompt,seed\na \"big\" fox,1\n\"a\"b,2\n");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].prompt, "a \"big\" fox");
  EXPECT_EQ(specs[1].prompt, "ab");
}

TEST(PromptTable, TheKnownColumnsAreReadAsAJsonlLinesKeys) {
  auto specs = csv("id,width,prompt,negative_prompt,steps,guidance_scale,height,num_images,seed\n"
                   "fox-1,512,a fox,blurry,20,4.5,768,2,42\n");
  ASSERT_EQ(specs.size(), 1u);
  const io::PromptSpec& s = specs[0];
  EXPECT_EQ(s.prompt, "a fox");
  EXPECT_EQ(s.id, "fox-1");
  EXPECT_EQ(s.negative_prompt, "blurry");
  EXPECT_EQ(s.width, 512);
  EXPECT_EQ(s.height, 768);
  EXPECT_EQ(s.steps, 20);
  EXPECT_EQ(s.guidance_scale, 4.5);
  EXPECT_EQ(s.num_images, 2);
  EXPECT_EQ(s.seed, 42);
  EXPECT_TRUE(s.fields.empty());
}

TEST(PromptTable, TsvAndAnotherPromptColumn) {
  io::PromptFileOptions o;
  o.prompt_column = "caption";
  auto specs = io::parse_prompts("caption\tseed\na, b \"c\"\t3\n", "p.tsv", io::PromptFormat::kTsv, o);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].prompt, "a, b \"c\"");
  EXPECT_EQ(specs[0].seed, 3);
  EXPECT_EQ(io::prompt_format_of("x/P.TSV", false), io::PromptFormat::kTsv);
  EXPECT_EQ(io::prompt_format_of("p.csv", false), io::PromptFormat::kCsv);
}

TEST(PromptTable, KeptColumnsArriveAsStrings) {
  auto specs = csv("prompt,tag,url\na,single_object,http://x/1\nb,,\n", keeping());
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].fields, (nlohmann::json{{"tag", "single_object"}, {"url", "http://x/1"}}));
  EXPECT_EQ(specs[1].fields, (nlohmann::json{{"tag", ""}, {"url", ""}}));
}

TEST(PromptTable, KeptJsonlKeysArriveAsWritten) {
  // A GenEval evaluation_metadata.jsonl line.
  auto specs = io::parse_prompts(
      "{\"tag\": \"counting\", \"include\": [{\"class\": \"bench\", \"count\": 2}], \"exclude\": [], "
      "\"prompt\": \"a photo of two benches\"}\n",
      "p.jsonl", io::PromptFormat::kJsonl, keeping());
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].prompt, "a photo of two benches");
  EXPECT_EQ(specs[0].fields, nlohmann::json::parse(R"({"tag": "counting", "include": [{"class": "bench", "count": 2}],
                                                       "exclude": []})"));
}

TEST(PromptTable, UnknownKeysAndColumnsAreRefusedWithoutKeepFields) {
  EXPECT_EQ(csv_error("prompt,tag\na,b\n"),
            "'p.csv' line 1: unknown column 'tag'; the prompt is in column 'prompt' (--prompt-column), and the others "
            "may be negative_prompt, seed, steps, guidance_scale, width, height, num_images, id, image, strength, mask (--keep-fields keeps "
            "unknown columns)");
  try {
    io::parse_prompts("{\"prompt\": \"a\", \"tag\": 1}\n", "p.jsonl", true);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'tag'; allowed: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(--keep-fields keeps unknown keys)"),
              std::string::npos);
  }
}

TEST(PromptTable, AKeptFieldMayNotHaveARecordKeysName) {
  const auto reserved = [](const std::string& k) { return k == "file_name" || k == "status"; };
  EXPECT_EQ(csv_error("prompt,file_name\na,b\n", keeping(reserved)),
            "'p.csv' line 1: column 'file_name' is one that dpinfer writes in each image's record itself, so "
            "--keep-fields cannot keep it; rename it");
  try {
    io::parse_prompts("{\"prompt\": \"a\", \"status\": \"x\"}\n", "p.jsonl", io::PromptFormat::kJsonl,
                      keeping(reserved));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "'p.jsonl' line 1: key 'status' is one that dpinfer writes in each image's "
                                     "record itself, so --keep-fields cannot keep it; rename it");
  }
}

TEST(PromptTable, EachBadInputIsOneLineNamingFileLineAndColumn) {
  EXPECT_EQ(csv_error("prompt,seed\na,1\nb,2,3\n"),
            "'p.csv' line 3: this row has 3 cell(s), the header 2; quote a cell that holds a comma (\"a, b\"), or "
            "fix the row (CSV)");
  EXPECT_EQ(csv_error("prompt\nok\n\"never ends\nat all\n"),
            "'p.csv' line 3: bad quoting: a quoted cell that begins on this row never ends; close it with a quote, "
            "and write a quote inside a quoted cell twice (\"\")");
  EXPECT_EQ(csv_error("caption,url\na,b\n"),
            "'p.csv' line 1: no column 'prompt' for the prompt (the header has 'caption', 'url'); name the prompt's "
            "column with --prompt-column");
  EXPECT_EQ(csv_error("prompt,seed,seed\na,1,2\n"), "'p.csv' line 1: column 'seed' appears twice in the header; keep one");
  EXPECT_EQ(csv_error("prompt,steps\na,\"20 \"\n"), "'p.csv' line 2: column 'steps' must be an integer, got '20 '");
  EXPECT_EQ(csv_error("prompt,width\na,20000\n"), "'p.csv' line 2: column 'width' must be in 8..16384, got 20000");
  EXPECT_EQ(csv_error("prompt,guidance_scale\na,nan\n"),
            "'p.csv' line 2: column 'guidance_scale' must be a finite number, got 'nan'");
  EXPECT_EQ(csv_error("prompt,seed,num_images\na,9223372036854775807,2\n"),
            "'p.csv' line 2: 'seed' + num_images - 1 must stay below 2^63; lower the seed");
  EXPECT_NE(csv_error("prompt\n\"\xff\"\n").find("'p.csv' line 2: column 'prompt' is not valid UTF-8 at byte 1"),
            std::string::npos);
  EXPECT_NE(csv_error(std::string("prompt\na\0b\n", 11)).find("line 2: column 'prompt' contains a NUL"),
            std::string::npos);
}

TEST(PromptTable, AHeaderAloneOrNothingHoldsNoPrompt) {
  EXPECT_TRUE(csv("").empty());
  EXPECT_TRUE(csv("prompt,seed\n").empty());
  EXPECT_TRUE(csv("\n\n").empty());
}

// DPG-Bench's dpg_bench/prompts/: one <id>.txt per prompt.
TEST(PromptFolder, EachTxtFileIsOnePromptNamedByItsStem) {
  dpinfer::test::TempDir dir;
  dpinfer::test::write_file(dir.file("256.txt"), "A small blue cup.\n\n");
  dpinfer::test::write_file(dir.file("1.txt"), "An eye-catching red truck, \"vibrant\".");
  dpinfer::test::write_file(dir.file("notes.md"), "not a prompt");
  dpinfer::test::write_file(dir.file(".hidden.txt"), "not one either");
  const auto specs = io::read_prompt_file(dir.path(), io::PromptFileOptions{});
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].id, "1");
  EXPECT_EQ(specs[0].prompt, "An eye-catching red truck, \"vibrant\".");
  EXPECT_EQ(specs[0].line, 1);
  EXPECT_EQ(specs[1].id, "256");
  EXPECT_EQ(specs[1].prompt, "A small blue cup.") << "trailing newlines dropped";
  dpinfer::test::write_file(dir.file("3.txt"), "  \n");
  try {
    io::read_prompt_folder(dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "prompt file '" + dir.file("3.txt") + "' is empty; write its prompt in it, or remove it");
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// io::parse_json_text and io::json_brief (io/json_file.h): the one JSON parser for
// input dpinfer did not write, and the one way a message quotes a JSON value.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/io/json_file.h"

using namespace dpinfer;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string parse_error(const std::string& text, io::JsonDialect dialect = io::JsonDialect::kPython,
                        bool unique_keys = false) {
  try {
    io::parse_json_text(text, dialect, unique_keys);
  } catch (const io::JsonSyntaxError& e) {
    return e.what();
  }
  return "";
}

/// `depth` arrays, each inside the last, built without recursion.
json deep_array(int depth) {
  json root = json::array();
  json* inner = &root;
  for (int i = 1; i < depth; ++i) {
    inner->push_back(json::array());
    inner = &inner->back();
  }
  return root;
}


TEST(JsonFile, RefusesNestingPastTheLimitInEveryDialect) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(parse_error(deep), "nested deeper than 64 levels");
  EXPECT_EQ(parse_error(deep, io::JsonDialect::kStrict), "nested deeper than 64 levels");
  EXPECT_EQ(parse_error("{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}"), "nested deeper than 64 levels");
  EXPECT_EQ(parse_error(std::string(64, '[') + std::string(64, ']')), "");
}

TEST(JsonFile, NumbersOutOfRangeAreASyntaxError) {
  EXPECT_NE(parse_error("{\"a\": 1e999}").find("number overflow"), std::string::npos) << parse_error("{\"a\": 1e999}");
  EXPECT_NE(parse_error("[-1e999]", io::JsonDialect::kStrict).find("number overflow"), std::string::npos);
}

TEST(JsonFile, TheStrictDialectRefusesPythonsNonFiniteTokens) {
  EXPECT_EQ(io::parse_json_text("{\"x\": NaN}")["x"], "NaN");
  EXPECT_NE(parse_error("{\"x\": NaN}", io::JsonDialect::kStrict), "");
  EXPECT_NE(parse_error("[Infinity]", io::JsonDialect::kStrict), "");
}

TEST(JsonFile, UniqueKeysNamesTheKeyAndItsDepth) {
  try {
    io::parse_json_text(R"({"a": {"b": 1, "b": 2}})", io::JsonDialect::kStrict, true);
    FAIL();
  } catch (const io::JsonDuplicateKey& e) {
    EXPECT_EQ(e.key(), "b");
    EXPECT_EQ(e.depth(), 2);
    EXPECT_STREQ(e.what(), "key 'b' appears twice in one object");
  }
  // The same key in sibling objects, or in objects inside arrays, is no duplicate.
  EXPECT_EQ(parse_error(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})", io::JsonDialect::kStrict, true),
            "");
  EXPECT_EQ(parse_error(R"({"k": 1, "k": 2})"), "");  // not asked for: nlohmann keeps the last
  EXPECT_EQ(parse_error("{\"a\\u001b[2J\": 1, \"a\\u001b[2J\": 2}", io::JsonDialect::kStrict, true),
            "key 'a\\x1B[2J' appears twice in one object");
}

TEST(JsonFile, ErrorsAreOneBoundedLine) {
  // nlohmann quotes the token it stopped at: here a 5 MB unterminated string with an ESC.
  const std::string bad = "[\"\x1b]0;x" + std::string(5'000'000, 'a');
  const std::string why = parse_error(bad, io::JsonDialect::kStrict);
  EXPECT_LT(why.size(), 300u) << why.size();
  EXPECT_EQ(why.find('\x1b'), std::string::npos);
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

TEST(JsonBrief, IsCompactJsonForSmallValues) {
  EXPECT_EQ(io::json_brief(json::parse(R"([2,-3])")), "[2,-3]");
  EXPECT_EQ(io::json_brief(json("Q4")), "\"Q4\"");
  EXPECT_EQ(io::json_brief(json::parse(R"({"a":[1,2.5,null,true],"b":{}})")), R"({"a":[1,2.5,null,true],"b":{}})");
  EXPECT_EQ(io::json_brief(json::array()), "[]");
}

TEST(JsonBrief, IsBoundedWhateverTheSizeOrDepth) {
  EXPECT_EQ(io::json_brief(json(std::string(5'000'000, 'x')), 20), "\"" + std::string(19, 'x') + "...");
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_LE(io::json_brief(wide, 60).size(), 63u);
  // 100,000 levels: dump() would overflow the stack here; the brief form stops at 8.
  const std::string deep = io::json_brief(deep_array(100000), 60);
  EXPECT_EQ(deep, "[[[[[[[[[...]]]]]]]]]");  // 8 levels, then one [...]
  json obj = json::object();
  obj["k"] = deep_array(100);
  EXPECT_EQ(io::json_brief(obj), "{\"k\":[[[[[[[[...]]]]]]]]}");
}

TEST(JsonBrief, EscapesWhatATerminalWouldObey) {
  // dump() escapes C0 controls itself; printable() the rest (C1, bidi controls, U+2028).
  const std::string s = io::json_brief(json("a\x1b[2J\n\xC2\x9B\xE2\x80\xAE"));
  EXPECT_EQ(s, "\"a\\u001b[2J\\n\\x9B\\u202E\"");
  EXPECT_EQ(io::json_brief(json::parse("{\"\\u001b]0;t\\u0007\": 1}")), "{\"\\u001b]0;t\\u0007\":1}");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

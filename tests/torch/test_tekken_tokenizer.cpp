// TekkenTokenizer against transformers' conversion of Mistral's Tekken tokenizer (LlamaTokenizerFast)
// on the real 131,072-id vocabulary: the goldens in tests/data/tokenizer/tekken*/ come from
// tools/fixtures/make_tekken_tokenizer_goldens.py.
#include "dpinfer/pipeline/text/tekken_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using dpinfer::pipeline::Encoding;
using dpinfer::pipeline::TekkenTokenizer;
using nlohmann::json;

const std::string kTekkenDir = std::string(DPINFER_TEST_DATA_DIR) + "/tokenizer/tekken";

const json& corpus() {
  static const json doc = json::parse(dpinfer::test::read_file(kTekkenDir + "/corpus.json"));
  return doc;
}

const std::string& tokenizer_json() {
  static const std::string text = dpinfer::test::read_file(kTekkenDir + "/tokenizer.json");
  return text;
}

// tokenizer.json with its Split pattern replaced by `pattern` (as json text, escaped).
std::string with_pattern(const std::string& pattern) {
  const std::string from = json(corpus()["patterns"]["hf"].get<std::string>()).dump();
  std::string text = tokenizer_json();
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  EXPECT_EQ(text.find(from, at + 1), std::string::npos);
  if (at != std::string::npos) text.replace(at, from.size(), json(pattern).dump());
  return text;
}

// The folder as it is (the pattern transformers' conversion writes: "hf"), and a copy with
// Tekken's own pattern (what fix_mistral_regex=True runs: "tekken").
const TekkenTokenizer& tokenizer(const std::string& pattern) {
  static const TekkenTokenizer hf = TekkenTokenizer::from_dir(kTekkenDir);
  static const TekkenTokenizer tekken = [] {
    dpinfer::test::TempDir dir;
    dpinfer::test::write_file(dir.file("tokenizer.json"), with_pattern(corpus()["patterns"]["tekken"]));
    dpinfer::test::write_file(dir.file("tokenizer_config.json"),
                              dpinfer::test::read_file(kTekkenDir + "/tokenizer_config.json"));
    return TekkenTokenizer::from_dir(dir.path());
  }();
  return pattern == "hf" ? hf : tekken;
}

std::string show(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return "[" + out + "]";
}

std::vector<int64_t> ids_of(const json& j) { return j.get<std::vector<int64_t>>(); }

void expect_corpus_matches(const std::string& pattern) {
  const TekkenTokenizer& tok = tokenizer(pattern);
  size_t checked = 0;
  for (const json& entry : corpus()["entries"]) {
    const std::string text = entry["text"].get<std::string>();
    const std::vector<int64_t> want = ids_of(entry[pattern]);
    const std::vector<int64_t> got = tok.tokenize(text);
    EXPECT_EQ(got, want) << entry["name"].get<std::string>() << " " << json(text).dump() << "\n  got    " << show(got)
                         << "\n  wanted " << show(want);
    ++checked;
  }
  EXPECT_GE(checked, 500u);
}

std::string load_error(const std::string& dir) {
  try {
    TekkenTokenizer::from_dir(dir);
  } catch (const dpinfer::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TekkenTokenizer, LoadsTheConvertedFolder) {
  for (const char* pattern : {"hf", "tekken"}) {
    const TekkenTokenizer& tok = tokenizer(pattern);
    EXPECT_EQ(tok.tekken_pattern(), std::string(pattern) == "tekken");
    EXPECT_EQ(tok.vocab_size(), 131072u);
    EXPECT_EQ(tok.pad_id(), 11);
    EXPECT_TRUE(tok.pads_left());
    EXPECT_EQ(tok.model_max_length(), TekkenTokenizer::kNoModelMaxLength);
    EXPECT_EQ(tok.token_id("<unk>"), 0);
    EXPECT_EQ(tok.token_id("<s>"), 1);
    EXPECT_EQ(tok.token_id("[INST]"), 3);
    EXPECT_EQ(tok.token_id("[IMG]"), 10);
    EXPECT_EQ(tok.token_id("[SYSTEM_PROMPT]"), 17);
    EXPECT_EQ(tok.token_id("[/SYSTEM_PROMPT]"), 18);
    EXPECT_EQ(tok.token_id("<SPECIAL_999>"), 999);
    EXPECT_EQ(tok.token_id("no such token"), std::nullopt);
    std::vector<dpinfer::pipeline::SpecialToken> specials = tok.special_tokens();
    ASSERT_EQ(specials.size(), 4u);
    EXPECT_EQ(specials[0].role, "bos");
    EXPECT_EQ(specials[0].id, 1);
    EXPECT_EQ(specials[1].id, 2);
    EXPECT_EQ(specials[2].token, "<pad>");
    EXPECT_EQ(specials[3].id, 0);
  }
}

TEST(TekkenTokenizer, CorpusMatchesTransformersWithTheFilesPattern) { expect_corpus_matches("hf"); }

TEST(TekkenTokenizer, CorpusMatchesTransformersWithTekkensPattern) { expect_corpus_matches("tekken"); }

TEST(TekkenTokenizer, TekkensPatternSplitsCamelCaseAndDigits) {
  const TekkenTokenizer& tek = tokenizer("tekken");
  const TekkenTokenizer& hf = tokenizer("hf");
  EXPECT_EQ(tek.tokenize("0123456789").size(), 10u);
  std::vector<int64_t> hello_world = tek.tokenize("Hello");
  for (int64_t id : tek.tokenize("World")) hello_world.push_back(id);
  EXPECT_EQ(tek.tokenize("HelloWorld"), hello_world);
  size_t differ = 0;
  for (const json& entry : corpus()["entries"]) differ += entry["hf"] != entry["tekken"];
  EXPECT_GT(differ, 0u);
  EXPECT_EQ(hf.tokenize("<s>[INST]"), (std::vector<int64_t>{1, 3}));
}

TEST(TekkenTokenizer, PadsAndTruncatesOnBothSides) {
  const TekkenTokenizer right = TekkenTokenizer::from_dir(kTekkenDir + "-right");
  EXPECT_FALSE(right.pads_left());
  size_t n = 0;
  for (const json& c : corpus()["padded"]) {
    const TekkenTokenizer& tok = c["side"] == "left" ? tokenizer("hf") : right;
    const std::string text = c["text"].get<std::string>();
    const int max_length = c["max_length"].get<int>();
    Encoding got = tok.encode(text, max_length);
    EXPECT_EQ(got.ids, ids_of(c["input_ids"])) << c["side"] << " " << max_length << " " << json(text).dump();
    EXPECT_EQ(got.attention_mask, ids_of(c["attention_mask"])) << c["side"] << " " << max_length;
    const int64_t all = int64_t(tok.tokenize(text).size());
    EXPECT_EQ(got.dropped_tokens, std::max<int64_t>(0, all - max_length));
    ++n;
  }
  EXPECT_GE(n, 12u);
  EXPECT_THROW(tokenizer("hf").encode("x", 0), dpinfer::Error);
}

TEST(TekkenTokenizer, Flux2DevsChatCallMatches) {
  const json& f = corpus()["flux2"];
  const int max_length = f["max_length"].get<int>();
  for (const json& call : f["calls"]) {
    std::string text = "<s>[SYSTEM_PROMPT]" + f["system"].get<std::string>() + "[/SYSTEM_PROMPT][INST]" +
                       call["prompt"].get<std::string>() + "[/INST]";
    for (const char* pattern : {"hf", "tekken"}) {
      Encoding got = tokenizer(pattern).encode(text, max_length);
      EXPECT_EQ(got.ids, ids_of(call[pattern]["input_ids"])) << pattern << " " << call["prompt"];
      EXPECT_EQ(got.attention_mask, ids_of(call[pattern]["attention_mask"])) << pattern;
    }
  }
}

TEST(TekkenTokenizer, PaddingSideFollowsTransformersOrderOfPrecedence) {
  json config = json::parse(dpinfer::test::read_file(kTekkenDir + "/tokenizer_config.json"));
  json doc = json::parse(tokenizer_json());
  auto side = [&](const std::string& cls, const char* stated, const char* direction) {
    dpinfer::test::TempDir dir;
    json c = config;
    c.erase("padding_side");
    c["tokenizer_class"] = cls;
    if (stated != nullptr) c["padding_side"] = stated;
    json d = doc;
    if (direction != nullptr) {
      d["padding"] = {{"strategy", "BatchLongest"}, {"direction", direction}, {"pad_to_multiple_of", nullptr},
                      {"pad_id", 11}, {"pad_type_id", 0}, {"pad_token", "<pad>"}};
    }
    dpinfer::test::write_file(dir.file("tokenizer.json"), d.dump());
    dpinfer::test::write_file(dir.file("tokenizer_config.json"), c.dump());
    return TekkenTokenizer::from_dir(dir.path()).pads_left() ? "left" : "right";
  };
  // As asserted against transformers in make_tekken_tokenizer_goldens.py (padding_side_rules).
  EXPECT_STREQ(side("LlamaTokenizerFast", nullptr, nullptr), "left");
  EXPECT_STREQ(side("PreTrainedTokenizerFast", nullptr, nullptr), "right");
  EXPECT_STREQ(side("LlamaTokenizerFast", "right", nullptr), "right");
  EXPECT_STREQ(side("LlamaTokenizerFast", nullptr, "Right"), "right");
  EXPECT_STREQ(side("LlamaTokenizerFast", "left", "Right"), "left");
  EXPECT_STREQ(side("PreTrainedTokenizerFast", nullptr, "Left"), "left");
}

TEST(TekkenTokenizer, IsServedByTheTokenizerClassTable) {
  for (const char* name : {"PixtralProcessor", "LlamaTokenizerFast", "PreTrainedTokenizerFast"}) {
    const dpinfer::pipeline::TokenizerClass* kind = dpinfer::pipeline::find_tokenizer_class(name);
    ASSERT_NE(kind, nullptr) << name;
    EXPECT_EQ(kind->needed_files, std::vector<std::string>{"tokenizer.json"});
  }
  std::unique_ptr<dpinfer::pipeline::Tokenizer> tok =
      dpinfer::pipeline::find_tokenizer_class("LlamaTokenizerFast")->load(kTekkenDir);
  EXPECT_EQ(tok->encode("Hello", 4).ids, (std::vector<int64_t>{11, 11, 11, tokenizer("hf").tokenize("Hello")[0]}));
}

TEST(TekkenTokenizer, RejectsInvalidUtf8NamingTheByte) {
  try {
    tokenizer("hf").tokenize("ab\xff");
    FAIL() << "no error";
  } catch (const dpinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid utf-8 at byte 2 (0xff)"), std::string::npos) << e.what();
  }
}

TEST(TekkenTokenizer, RefusalsAreOneLineErrorsNamingTheFileAndField) {
  const std::string config = dpinfer::test::read_file(kTekkenDir + "/tokenizer_config.json");
  auto expect_error = [&](const std::string& tokenizer_json_text, const std::string& config_text,
                          const std::string& file, const std::string& what) {
    dpinfer::test::TempDir dir;
    if (!tokenizer_json_text.empty()) dpinfer::test::write_file(dir.file("tokenizer.json"), tokenizer_json_text);
    dpinfer::test::write_file(dir.file("tokenizer_config.json"), config_text);
    const std::string msg = load_error(dir.path());
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  expect_error("", config, "tokenizer.json", "cannot open tokenizer file");
  expect_error("{\"model\": ", config, "tokenizer.json", "is not valid json");
  // Qwen2's pattern: \p{N} where the Llama 3 one has \p{N}{1,3}.
  std::string qwen = corpus()["patterns"]["hf"].get<std::string>();
  qwen.replace(qwen.find("{1,3}"), 5, "");
  expect_error(with_pattern(qwen), config, "tokenizer.json",
               "pre_tokenizer.pretokenizers[0].pattern.Regex \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|");
  json doc = json::parse(tokenizer_json());
  json d = doc;
  d["normalizer"] = {{"type", "NFC"}};
  expect_error(d.dump(), config, "tokenizer.json", "normalizer {\"type\":\"NFC\"} is not supported");
  d = doc;
  d["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  expect_error(d.dump(), config, "tokenizer.json", "pre_tokenizer is not a Mistral conversion's");
  d = doc;
  d["model"]["type"] = "Unigram";
  expect_error(d.dump(), config, "tokenizer.json", "model.type \"Unigram\" is not supported");
  d = doc;
  d["added_tokens"][3]["lstrip"] = true;
  json c = json::parse(config);
  c["added_tokens_decoder"]["3"]["lstrip"] = true;
  expect_error(d.dump(), c.dump(), "tokenizer_config.json", "added token \"[INST]\" sets lstrip");
  c = json::parse(config);
  c["padding_side"] = "middle";
  expect_error(tokenizer_json(), c.dump(), "tokenizer_config.json", "padding_side must be \"right\" or \"left\"");
  expect_error(tokenizer_json(), "{", "tokenizer_config.json", "is not valid json");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

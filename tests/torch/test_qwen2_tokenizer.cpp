// Qwen2Tokenizer against transformers' Qwen2TokenizerFast on Qwen's real vocabulary: the
// goldens in tests/data/tokenizer/qwen2*/ come from tools/fixtures/make_qwen_tokenizer_goldens.py.
#include "dpinfer/pipeline/text/qwen2_tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dpinfer/pipeline/text/clip_tokenizer.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using dpinfer::pipeline::Encoding;
using dpinfer::pipeline::Padding;
using dpinfer::pipeline::Qwen2Tokenizer;
using nlohmann::json;

const std::string kDataDir = std::string(DPINFER_TEST_DATA_DIR) + "/tokenizer";

const json& corpus() {
  static const json doc = json::parse(dpinfer::test::read_file(kDataDir + "/qwen2/corpus.json"));
  return doc;
}

const Qwen2Tokenizer& tokenizer(const std::string& config) {
  static const Qwen2Tokenizer qwen2 = Qwen2Tokenizer::from_dir(kDataDir + "/qwen2");
  static const Qwen2Tokenizer qwen3 = Qwen2Tokenizer::from_dir(kDataDir + "/qwen2-qwen3");
  return config == "qwen2" ? qwen2 : qwen3;
}

std::string show(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return "[" + out + "]";
}

std::vector<int64_t> ids_of(const json& j) { return j.get<std::vector<int64_t>>(); }

// Every corpus entry against `config`'s fast ids; the slow ids, where they differ, are not ours.
void expect_corpus_matches(const Qwen2Tokenizer& tok, const std::string& config) {
  size_t checked = 0, slow_differs = 0;
  for (const json& entry : corpus()["entries"]) {
    const std::string name = entry["name"].get<std::string>();
    const std::string text = entry["text"].get<std::string>();
    const json& golden = config == "small" ? entry : entry[config];
    const std::vector<int64_t> want = ids_of(config == "small" ? golden["small"] : golden["ids"]);
    const std::vector<int64_t> got = tok.tokenize(text);
    EXPECT_EQ(got, want) << name << " " << json(text).dump() << "\n  got    " << show(got) << "\n  wanted " << show(want);
    if (config != "small" && golden.contains("slow")) ++slow_differs;
    ++checked;
  }
  EXPECT_GE(checked, 400u);
  if (config != "small") {
    EXPECT_EQ(slow_differs, 9u) << "entries where the slow Qwen2Tokenizer differs";
  }
}

std::string load_error(const std::string& dir) {
  try {
    Qwen2Tokenizer::from_dir(dir);
  } catch (const dpinfer::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// GPT-2's bytes_to_unicode, to write small byte-level vocabularies.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> out(256);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t cp = printable ? char32_t(b) : next++;
    std::string& s = out[size_t(b)];
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// A tiny valid folder: the 256 byte symbols, "ab" and "abc" (ids 256 and 257).
json minimal_vocab() {
  json vocab = json::object();
  std::vector<std::string> bytes = byte_symbols();
  for (size_t b = 0; b < 256; ++b) vocab[bytes[b]] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return vocab;
}

void write_minimal(const dpinfer::test::TempDir& dir) {
  dpinfer::test::write_file(dir.file("vocab.json"), minimal_vocab().dump());
  dpinfer::test::write_file(dir.file("merges.txt"), "#version: 0.2\na b\nab c\n");
}

TEST(Qwen2Tokenizer, LoadsQwenImagesAndZImagesTokenizerFolders) {
  for (const char* config : {"qwen2", "qwen2-qwen3"}) {
    const Qwen2Tokenizer& tok = tokenizer(config);
    EXPECT_EQ(tok.vocab_size(), 151643u) << config;
    EXPECT_EQ(tok.pad_id(), 151643) << config;
    EXPECT_EQ(tok.eos_id(), 151645) << config;
    EXPECT_EQ(tok.model_max_length(), 131072) << config;
    EXPECT_FALSE(tok.pads_left());
    EXPECT_EQ(tok.token_id("<|im_start|>"), 151644);
    EXPECT_EQ(tok.token_id("<|file_sep|>"), 151664);
    EXPECT_EQ(tok.token_id("Ġworld"), 1879);
    EXPECT_EQ(tok.token_id("no such token"), std::nullopt);
    std::vector<dpinfer::pipeline::SpecialToken> specials = tok.special_tokens();
    ASSERT_EQ(specials.size(), 2u);  // no bos or unk in Qwen's folders
    EXPECT_EQ(specials[0].role, "eos");
    EXPECT_EQ(specials[0].token, "<|im_end|>");
    EXPECT_EQ(specials[1].role, "pad");
    EXPECT_EQ(specials[1].id, 151643);
  }
  EXPECT_EQ(tokenizer("qwen2").token_id("<think>"), std::nullopt);
  EXPECT_EQ(tokenizer("qwen2-qwen3").token_id("<think>"), 151667);
  EXPECT_EQ(tokenizer("qwen2-qwen3").token_id("</tool_response>"), 151666);
}

TEST(Qwen2Tokenizer, GivesTheIdsOfTransformersDocstring) {
  EXPECT_EQ(tokenizer("qwen2").tokenize("Hello world"), (std::vector<int64_t>{9707, 1879}));
  EXPECT_EQ(tokenizer("qwen2").tokenize(" Hello world"), (std::vector<int64_t>{21927, 1879}));
  EXPECT_EQ(tokenizer("qwen2").tokenize(""), std::vector<int64_t>{});
}

TEST(Qwen2Tokenizer, CorpusMatchesQwen2TokenizerFast) { expect_corpus_matches(tokenizer("qwen2"), "qwen2"); }

TEST(Qwen2Tokenizer, CorpusMatchesQwen2TokenizerFastWithQwen3sAddedTokens) {
  expect_corpus_matches(tokenizer("qwen2-qwen3"), "qwen2-qwen3");
}

TEST(Qwen2Tokenizer, AFolderWithOnlyTokenizerJsonMatches) {
  Qwen2Tokenizer small = Qwen2Tokenizer::from_dir(kDataDir + "/qwen2-small");
  EXPECT_EQ(small.vocab_size(), 3000u);
  EXPECT_EQ(small.token_id("<|im_start|>"), 3001);
  expect_corpus_matches(small, "small");
}

TEST(Qwen2Tokenizer, ReadsTokenizerJsonMergesWrittenAsStrings) {
  // tokenizers before 0.20 (Qwen2's own tokenizer.json among them) wrote "a b", not ["a", "b"].
  json doc = json::parse(dpinfer::test::read_file(kDataDir + "/qwen2-small/tokenizer.json"));
  for (json& m : doc["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  doc["model"].erase("ignore_merges");
  dpinfer::test::TempDir dir;
  dpinfer::test::write_file(dir.file("tokenizer.json"), doc.dump());
  dpinfer::test::write_file(dir.file("tokenizer_config.json"),
                            dpinfer::test::read_file(kDataDir + "/qwen2-small/tokenizer_config.json"));
  Qwen2Tokenizer tok = Qwen2Tokenizer::from_dir(dir.path());
  size_t n = 0;
  for (const json& entry : corpus()["entries"]) {
    if (n++ % 5 != 0) continue;
    EXPECT_EQ(tok.tokenize(entry["text"].get<std::string>()), ids_of(entry["small"])) << entry["name"];
  }
}

TEST(Qwen2Tokenizer, SplitsEveryDigit) {
  const Qwen2Tokenizer& tok = tokenizer("qwen2");
  std::vector<int64_t> digits;
  for (char d = '0'; d <= '9'; ++d) digits.push_back(15 + (d - '0'));  // "0" is id 15
  EXPECT_EQ(tok.tokenize("0123456789"), digits);
  EXPECT_EQ(tok.tokenize("2024").size(), 4u);
}

TEST(Qwen2Tokenizer, SplitsTheChatTokensOutOfTheText) {
  const Qwen2Tokenizer& qwen2 = tokenizer("qwen2");
  const Qwen2Tokenizer& qwen3 = tokenizer("qwen2-qwen3");
  EXPECT_EQ(qwen2.tokenize("<|im_start|>user\nhi<|im_end|>"), (std::vector<int64_t>{151644, 872, 198, 6023, 151645}));
  EXPECT_EQ(qwen2.tokenize("<|im_start|><|im_end|><|endoftext|>"), (std::vector<int64_t>{151644, 151645, 151643}));
  EXPECT_GT(qwen2.tokenize("<|IM_START|>").size(), 1u);  // case matters
  EXPECT_EQ(qwen3.tokenize("<think>").size(), 1u);
  EXPECT_GT(qwen2.tokenize("<think>").size(), 1u);  // only Qwen3 has it
  // The fast tokenizer splits the token out before NFC; the slow one's NFC composes its
  // ">" and U+0338 into U+226F first (corpus entry specials/31).
  std::vector<int64_t> ids = qwen2.tokenize("<|im_start|>\xCC\xB8");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 151644);
}

TEST(Qwen2Tokenizer, QwenImagesTemplatePrefixIsThe34IdsDiffusersDrops) {
  const json& qi = corpus()["qwen_image"];
  const std::string tmpl = qi["template"].get<std::string>();
  const std::string prefix = tmpl.substr(0, tmpl.find("{}"));
  ASSERT_EQ(prefix.substr(prefix.size() - 5), "user\n");
  const std::vector<int64_t> ids = tokenizer("qwen2").tokenize(prefix);
  EXPECT_EQ(ids.size(), 34u);
  EXPECT_EQ(qi["drop"].get<size_t>(), 34u);
  EXPECT_EQ(ids, ids_of(qi["prefix_ids"]));
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 4), (std::vector<int64_t>{151644, 8948, 198, 74785}));
  EXPECT_EQ(std::vector<int64_t>(ids.end() - 5, ids.end()), (std::vector<int64_t>{151645, 198, 151644, 872, 198}));
  auto templated = [&](const std::string& prompt) {
    std::string text = tmpl;
    text.replace(text.find("{}"), 2, prompt);
    return tokenizer("qwen2").tokenize(text);
  };
  // The prompt's ids start after those 34 ...
  for (const char* prompt : {"a cat", " leading space", "\tx", "  x", "\r\nx", "一只猫", "'s", "<|im_end|>", ""}) {
    std::vector<int64_t> all = templated(prompt);
    ASSERT_GE(all.size(), 34u);
    EXPECT_EQ(std::vector<int64_t>(all.begin(), all.begin() + 34), ids) << json(prompt).dump();
  }
  // ... unless it starts with whitespace holding a newline: that joins the template's "\n"
  // in one piece, and the 34 ids diffusers drops then take the prompt's first characters.
  EXPECT_EQ(templated("\n\nnewlines")[33], 1406);  // "\n\n\n"
  EXPECT_EQ(templated(" \nx")[33], 26809);          // "\n \n"
}

TEST(Qwen2Tokenizer, QwenImagesBatchCallPadsToTheLongestAndTruncatesAt1058) {
  const json& qi = corpus()["qwen_image"];
  const std::string tmpl = qi["template"].get<std::string>();
  const int max_length = qi["max_length"].get<int>();
  for (const json& batch : qi["batches"]) {
    std::vector<std::string> texts;
    for (const json& p : batch["prompts"]) {
      std::string text = tmpl;
      text.replace(text.find("{}"), 2, p.get<std::string>());
      texts.push_back(text);
    }
    std::vector<Encoding> got = tokenizer("qwen2").encode_batch(texts, max_length, Padding::kLongest);
    ASSERT_EQ(got.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(got[i].ids, ids_of(batch["input_ids"][i])) << i;
      EXPECT_EQ(got[i].attention_mask, ids_of(batch["attention_mask"][i])) << i;
      // Alone, a prompt is not padded: its ids are the batch's where the mask is 1.
      Encoding alone = tokenizer("qwen2").encode_unpadded(texts[i], max_length);
      std::vector<int64_t> unpadded;
      for (size_t k = 0; k < got[i].ids.size(); ++k)
        if (got[i].attention_mask[k] == 1) unpadded.push_back(got[i].ids[k]);
      EXPECT_EQ(alone.ids, unpadded) << i;
      EXPECT_EQ(alone.attention_mask, std::vector<int64_t>(alone.ids.size(), 1));
    }
  }
  // The long prompt of the last batch loses its tail, the template's end included.
  std::string text = tmpl;
  text.replace(text.find("{}"), 2, qi["batches"][2]["prompts"][1].get<std::string>());
  Encoding long_one = tokenizer("qwen2").encode_unpadded(text, max_length);
  EXPECT_EQ(long_one.ids.size(), size_t(max_length));
  EXPECT_EQ(long_one.dropped_tokens, int64_t(tokenizer("qwen2").tokenize(text).size()) - max_length);
  EXPECT_GT(long_one.dropped_tokens, 0);
}

TEST(Qwen2Tokenizer, ZImagesCallPadsTo512) {
  const json& z = corpus()["z_image"];
  const std::string tmpl = z["template"].get<std::string>();
  const int max_length = z["max_length"].get<int>();
  for (const json& call : z["calls"]) {
    std::string text = tmpl;
    text.replace(text.find("{}"), 2, call["prompt"].get<std::string>());
    Encoding got = tokenizer("qwen2-qwen3").encode(text, max_length);
    EXPECT_EQ(got.ids, ids_of(call["input_ids"])) << call["prompt"];
    EXPECT_EQ(got.attention_mask, ids_of(call["attention_mask"])) << call["prompt"];
    std::vector<Encoding> batch = tokenizer("qwen2-qwen3").encode_batch({text}, max_length, Padding::kMaxLength);
    EXPECT_EQ(batch[0].ids, got.ids);
  }
}

TEST(Qwen2Tokenizer, AddedTokensStripAndMatchTheirNormalizedTextAsTokenizersDoes) {
  const json& strip = corpus()["strip"];
  Qwen2Tokenizer tok = Qwen2Tokenizer::from_dir(kDataDir + "/" + strip["dir"].get<std::string>());
  const int max_length = strip["max_length"].get<int>();
  EXPECT_EQ(tok.model_max_length(), max_length);
  EXPECT_TRUE(tok.pads_left());
  EXPECT_EQ(tok.token_id("cafe\xCC\x81"), 151646);
  for (const json& entry : strip["entries"]) {
    const std::string text = entry["text"].get<std::string>();
    EXPECT_EQ(tok.tokenize(text), ids_of(entry["ids"])) << json(text).dump();
    Encoding padded = tok.encode(text, max_length);
    EXPECT_EQ(padded.ids, ids_of(entry["padded"]["input_ids"])) << json(text).dump();
    EXPECT_EQ(padded.attention_mask, ids_of(entry["padded"]["attention_mask"])) << json(text).dump();
  }
}

TEST(Qwen2Tokenizer, IsServedByTheTokenizerClassTable) {
  for (const char* name : {"Qwen2Tokenizer", "Qwen2TokenizerFast"}) {
    const dpinfer::pipeline::TokenizerClass* kind = dpinfer::pipeline::find_tokenizer_class(name);
    ASSERT_NE(kind, nullptr) << name;
    std::unique_ptr<dpinfer::pipeline::Tokenizer> tok = kind->load(kDataDir + "/qwen2-small");
    EXPECT_EQ(tok->vocab_size(), 3000u);
    EXPECT_EQ(tok->encode("Hello", 4).ids.size(), 4u);
  }
}

TEST(Qwen2Tokenizer, CountsWhatTruncationDropsAndPadsOnTheRight) {
  const Qwen2Tokenizer& tok = tokenizer("qwen2");
  Encoding e = tok.encode("0123456789", 4);
  EXPECT_EQ(e.ids, (std::vector<int64_t>{15, 16, 17, 18}));
  EXPECT_EQ(e.dropped_tokens, 6);
  e = tok.encode("01", 4);
  EXPECT_EQ(e.ids, (std::vector<int64_t>{15, 16, 151643, 151643}));
  EXPECT_EQ(e.attention_mask, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(e.dropped_tokens, 0);
  EXPECT_EQ(tok.encode_unpadded("01", 4).ids, (std::vector<int64_t>{15, 16}));
  EXPECT_EQ(tok.encode("", 2).attention_mask, (std::vector<int64_t>{0, 0}));
  EXPECT_THROW(tok.encode("0", 0), dpinfer::Error);
}

TEST(Qwen2Tokenizer, EncodeBatchPadsCLIPAsItsEncodeDoes) {
  // The batch interface over CLIP: kMaxLength is encode(); kLongest pads to the longest.
  dpinfer::pipeline::CLIPTokenizer clip = dpinfer::pipeline::CLIPTokenizer::from_dir(kDataDir + "/clip");
  std::vector<std::string> texts{"a cat", "a photo of a red cat on a mat", ""};
  std::vector<Encoding> fixed = clip.encode_batch(texts, 77, Padding::kMaxLength);
  std::vector<Encoding> longest = clip.encode_batch(texts, 77, Padding::kLongest);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(fixed[i].ids, clip.encode(texts[i], 77).ids);
    EXPECT_EQ(longest[i].ids.size(), clip.encode_unpadded(texts[1], 77).ids.size());
    EXPECT_EQ(std::vector<int64_t>(fixed[i].ids.begin(), fixed[i].ids.begin() + int64_t(longest[i].ids.size())),
              longest[i].ids);
  }
}

TEST(Qwen2Tokenizer, RejectsInvalidUtf8NamingTheByte) {
  try {
    tokenizer("qwen2").tokenize("ab\xff");
    FAIL() << "no error";
  } catch (const dpinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid utf-8 at byte 2 (0xff)"), std::string::npos) << e.what();
  }
}

TEST(Qwen2Tokenizer, MissingFilesAreOneLineErrorsNamingThem) {
  dpinfer::test::TempDir empty;
  std::string msg = load_error(empty.path());
  EXPECT_NE(msg.find("cannot open tokenizer file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("or tokenizer.json"), std::string::npos) << msg;

  dpinfer::test::TempDir no_merges;
  dpinfer::test::write_file(no_merges.file("vocab.json"), minimal_vocab().dump());
  msg = load_error(no_merges.path());
  EXPECT_NE(msg.find("merges.txt"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  dpinfer::test::TempDir ok;
  write_minimal(ok);
  Qwen2Tokenizer tok = Qwen2Tokenizer::from_dir(ok.path());
  // "abc" merges whole; " abd" is " ", "ab", "d" (the byte symbols' ids are the bytes here).
  EXPECT_EQ(tok.tokenize("abc abd"), (std::vector<int64_t>{257, ' ', 256, 'd'}));
  EXPECT_EQ(tok.pad_id(), 258);  // <|endoftext|>, Qwen2Tokenizer's default, past the vocabulary
}

TEST(Qwen2Tokenizer, BadFilesAreOneLineErrorsNamingTheFileAndField) {
  auto expect_error = [](const dpinfer::test::TempDir& dir, const std::string& file, const std::string& what) {
    std::string msg = load_error(dir.path());
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  dpinfer::test::TempDir dir;
  write_minimal(dir);
  dpinfer::test::write_file(dir.file("vocab.json"), "{\"a\": 1,");
  expect_error(dir, "vocab.json", "is not valid json");
  dpinfer::test::write_file(dir.file("vocab.json"), R"({"a": 1})");
  expect_error(dir, "vocab.json", "the symbol of byte 0; it is not a byte-level BPE vocabulary");

  write_minimal(dir);
  dpinfer::test::write_file(dir.file("merges.txt"), "#version: 0.2\na b\nab c d\n");
  expect_error(dir, "merges.txt", "line 3 \"ab c d\" is not a merge of two symbols");
  dpinfer::test::write_file(dir.file("merges.txt"), "a b\nb c\n");
  expect_error(dir, "merges.txt", "line 2 merges into \"bc\", which is not in the vocabulary");
  dpinfer::test::write_file(dir.file("merges.txt"), "a b\nab zz\n");
  expect_error(dir, "merges.txt", "line 2 merges \"zz\", which is not in the vocabulary");

  write_minimal(dir);
  dpinfer::test::write_file(dir.file("tokenizer_config.json"), "{\"model_max_length\": 77");
  expect_error(dir, "tokenizer_config.json", "is not valid json");
  dpinfer::test::write_file(dir.file("tokenizer_config.json"), R"({"pad_token": 5})");
  expect_error(dir, "tokenizer_config.json", "pad_token must be a string or an object");
  dpinfer::test::write_file(dir.file("tokenizer_config.json"), R"({"padding_side": "middle"})");
  expect_error(dir, "tokenizer_config.json", "padding_side must be \"right\" or \"left\"");
  dpinfer::test::write_file(dir.file("tokenizer_config.json"), R"({"split_special_tokens": true})");
  expect_error(dir, "tokenizer_config.json", "split_special_tokens true is not supported");
  dpinfer::test::write_file(dir.file("tokenizer_config.json"), R"({"model_max_length": 0})");
  expect_error(dir, "tokenizer_config.json", "model_max_length must be an integer of at least 1");
  dpinfer::test::write_file(
      dir.file("tokenizer_config.json"),
      R"({"added_tokens_decoder": {"300": {"content": "<x>", "single_word": true, "special": true}}})");
  expect_error(dir, "tokenizer_config.json", "added token \"<x>\" sets single_word");
  dpinfer::test::write_file(dir.file("tokenizer_config.json"),
                            R"({"added_tokens_decoder": {"300": {"content": "<x>", "lstrip": "yes"}}})");
  expect_error(dir, "tokenizer_config.json", "added_tokens_decoder.300.lstrip must be true or false");

  dpinfer::test::write_file(dir.file("tokenizer_config.json"), R"({"pad_token": null})");
  Qwen2Tokenizer no_pad = Qwen2Tokenizer::from_dir(dir.path());
  EXPECT_EQ(no_pad.encode("ab", 1).ids, (std::vector<int64_t>{256}));  // nothing to pad
  try {
    no_pad.encode("ab", 3);
    FAIL() << "no error";
  } catch (const dpinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("defines no pad_token"), std::string::npos) << e.what();
  }
}

TEST(Qwen2Tokenizer, ATokenizerJsonThatIsNotQwen2sIsRefusedNamingTheField) {
  const json small = json::parse(dpinfer::test::read_file(kDataDir + "/qwen2-small/tokenizer.json"));
  auto error_with = [&](const std::function<void(json&)>& change) {
    json doc = small;
    change(doc);
    dpinfer::test::TempDir dir;
    dpinfer::test::write_file(dir.file("tokenizer.json"), doc.dump());
    return load_error(dir.path());
  };
  std::string msg = error_with([](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; });
  EXPECT_NE(msg.find("tokenizer.json: pre_tokenizer is not Qwen2's"), std::string::npos) << msg;
  msg = error_with([](json& d) { d["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; });
  EXPECT_NE(msg.find("pre_tokenizer"), std::string::npos) << msg;
  msg = error_with([](json& d) { d["normalizer"] = {{"type", "NFKC"}}; });
  EXPECT_NE(msg.find("tokenizer.json: normalizer {\"type\":\"NFKC\"} is not supported"), std::string::npos) << msg;
  msg = error_with([](json& d) { d["model"]["type"] = "Unigram"; });
  EXPECT_NE(msg.find("model.type \"Unigram\" is not supported"), std::string::npos) << msg;
  msg = error_with([](json& d) { d["model"]["merges"][5] = {"Ġ"}; });
  EXPECT_NE(msg.find("model.merges[5]"), std::string::npos) << msg;
  msg = error_with([](json& d) { d["post_processor"] = {{"type", "TemplateProcessing"}}; });
  EXPECT_NE(msg.find("post_processor"), std::string::npos) << msg;
  msg = error_with([](json& d) { d["added_tokens"][0].erase("id"); });
  EXPECT_NE(msg.find("added_tokens[0].id must be a token id"), std::string::npos) << msg;
  // No normalizer at all is accepted: then nothing is normalised.
  msg = error_with([](json& d) { d["normalizer"] = nullptr; });
  EXPECT_EQ(msg, "(no error)");
}

TEST(Qwen2Tokenizer, IsSafeToShareBetweenThreads) {
  std::vector<std::string> texts;
  std::vector<std::vector<int64_t>> want;
  for (const json& entry : corpus()["entries"]) {
    texts.push_back(entry["text"].get<std::string>());
    want.push_back(ids_of(entry["qwen2"]["ids"]));
  }
  Qwen2Tokenizer fresh = Qwen2Tokenizer::from_dir(kDataDir + "/qwen2");  // an empty word cache
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) {
        size_t k = (i * 7 + size_t(t) * 13) % texts.size();
        if (fresh.tokenize(texts[k]) != want[k]) ++mismatches[size_t(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(Qwen2Tokenizer, TokenizesTenThousandTemplatedPromptsWellUnderASecond) {
  const Qwen2Tokenizer& tok = tokenizer("qwen2");
  const std::string tmpl = corpus()["qwen_image"]["template"].get<std::string>();
  std::vector<std::string> prompts;
  for (const json& entry : corpus()["entries"]) {
    if (entry["text"].get<std::string>().size() < 300) prompts.push_back(entry["text"].get<std::string>());
  }
  auto start = std::chrono::steady_clock::now();
  size_t total = 0;
  for (size_t i = 0; i < 10000; ++i) {
    std::string text = tmpl;
    // Vary each prompt so that the word cache does not answer everything.
    text.replace(text.find("{}"), 2, prompts[i % prompts.size()] + " seed" + std::to_string(i));
    total += tok.encode_unpadded(text, 1058).ids.size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(total, 10000u * 34u);
  EXPECT_LT(seconds, 1.0);
  std::printf("[          ] 10k templated prompts in %.3f s\n", seconds);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

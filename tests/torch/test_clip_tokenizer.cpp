// CLIPTokenizer against transformers' slow CLIPTokenizer without ftfy: the goldens in
// tests/data/tokenizer come from tools/fixtures/make_tokenizer_goldens.py.
#include "dpinfer/pipeline/text/clip_tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dpinfer/io/utf8.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using dpinfer::pipeline::CLIPTokenizer;
using nlohmann::json;

const std::string kDataDir = std::string(DPINFER_TEST_DATA_DIR) + "/tokenizer";

const json& corpus() {
  static const json doc = [] {
    std::ifstream in(kDataDir + "/corpus.json");
    return json::parse(in);
  }();
  return doc;
}

const CLIPTokenizer& tokenizer(const std::string& config) {
  static const CLIPTokenizer sd1 = CLIPTokenizer::from_dir(kDataDir + "/clip");
  static const CLIPTokenizer sd2 = CLIPTokenizer::from_dir(kDataDir + "/clip-sd2");
  return config == "clip" ? sd1 : sd2;
}

std::string show(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return "[" + out + "]";
}

// Checks every corpus entry against `golden_config`'s ids; reports each mismatch by name.
void expect_corpus_matches(const CLIPTokenizer& tok, const std::string& golden_config) {
  const int max_length = corpus()["max_length"].get<int>();
  size_t checked = 0;
  for (const json& entry : corpus()["entries"]) {
    const std::string name = entry["name"].get<std::string>();
    const std::string prompt = entry["prompt"].get<std::string>();
    const json& golden = entry[golden_config];
    const auto input_ids = golden["input_ids"].get<std::vector<int64_t>>();
    const auto ids = golden["ids"].get<std::vector<int64_t>>();

    dpinfer::pipeline::Encoding enc = tok.encode(prompt, max_length);
    EXPECT_EQ(enc.ids, input_ids) << name << " " << json(prompt).dump() << "\n  got    " << show(enc.ids)
                                  << "\n  wanted " << show(input_ids);
    std::vector<int64_t> untruncated{tok.bos_id()};
    for (int64_t id : tok.tokenize(prompt)) untruncated.push_back(id);
    untruncated.push_back(tok.eos_id());
    EXPECT_EQ(untruncated, ids) << name << " " << json(prompt).dump();
    const int64_t dropped = std::max<int64_t>(0, int64_t(ids.size()) - max_length);
    EXPECT_EQ(enc.dropped_tokens, dropped) << name;
    ++checked;
  }
  EXPECT_GE(checked, 200u);
}

// POSIX only: the PyPI libtorch.so exports std::filesystem symbols that crash here.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/dpinfer-tok-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    for (const std::string& name : written_) ::unlink((path_ + "/" + name).c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
    written_.push_back(name);
  }

 private:
  std::string path_;
  std::vector<std::string> written_;
};

// A tiny but valid CLIP-style tokenizer folder: the two specials and no merges.
void write_minimal(TempDir& dir) {
  dir.write("vocab.json", R"({"<|startoftext|>": 0, "<|endoftext|>": 1})");
  dir.write("merges.txt", "#version: 0.2\n");
}

std::string load_error(const std::string& dir) {
  try {
    CLIPTokenizer::from_dir(dir);
  } catch (const dpinfer::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string encode_error(const std::string& prompt) {
  try {
    tokenizer("clip").encode(prompt, 77);
  } catch (const dpinfer::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CLIPTokenizer, LoadsTheSpecialTokensOfBothPadConfigs) {
  for (const char* config : {"clip", "clip-sd2"}) {
    const CLIPTokenizer& tok = tokenizer(config);
    const json& golden = corpus()["configs"][config];
    EXPECT_EQ(tok.bos_id(), golden["bos_id"].get<int64_t>()) << config;
    EXPECT_EQ(tok.eos_id(), golden["eos_id"].get<int64_t>()) << config;
    EXPECT_EQ(tok.pad_id(), golden["pad_id"].get<int64_t>()) << config;
    EXPECT_EQ(tok.unk_id(), 49407) << config;
    EXPECT_EQ(tok.model_max_length(), 77) << config;
    EXPECT_EQ(tok.vocab_size(), 49408u) << config;
  }
  EXPECT_EQ(tokenizer("clip").pad_id(), 49407);
  EXPECT_EQ(tokenizer("clip-sd2").pad_id(), 0);
}

TEST(CLIPTokenizer, CorpusMatchesTransformersWithSD1Padding) { expect_corpus_matches(tokenizer("clip"), "clip"); }

TEST(CLIPTokenizer, CorpusMatchesTransformersWithSD2Padding) {
  expect_corpus_matches(tokenizer("clip-sd2"), "clip-sd2");
}

TEST(CLIPTokenizer, ASavePretrainedFolderWithAddedTokensDecoderMatchesSD2) {
  CLIPTokenizer saved = CLIPTokenizer::from_dir(kDataDir + "/clip-sd2-saved");
  EXPECT_EQ(saved.pad_id(), 0);
  expect_corpus_matches(saved, "clip-sd2");
}

TEST(CLIPTokenizer, AddedTokensStripAndStayWholeWordsAsTransformersDoes) {
  const json& strip = corpus()["strip"];
  CLIPTokenizer tok = CLIPTokenizer::from_dir(kDataDir + "/" + strip["dir"].get<std::string>());
  const int max_length = strip["max_length"].get<int>();
  EXPECT_EQ(tok.model_max_length(), max_length);
  EXPECT_EQ(tok.pad_id(), strip["pad_id"].get<int64_t>());
  for (const json& entry : strip["entries"]) {
    const std::string prompt = entry["prompt"].get<std::string>();
    EXPECT_EQ(tok.encode(prompt, max_length).ids, entry["input_ids"].get<std::vector<int64_t>>())
        << json(prompt).dump();
    std::vector<int64_t> untruncated{tok.bos_id()};
    for (int64_t id : tok.tokenize(prompt)) untruncated.push_back(id);
    untruncated.push_back(tok.eos_id());
    EXPECT_EQ(untruncated, entry["ids"].get<std::vector<int64_t>>()) << json(prompt).dump();
  }
}

TEST(CLIPTokenizer, SD2PadTokenTrapTurnsLiteralBangsIntoPad) {
  // diffusers issue #4153: with pad "!", every "!" is split out as the added token.
  std::vector<int64_t> sd2 = tokenizer("clip-sd2").encode("! !! !!!", 77).ids;
  std::vector<int64_t> want{49406, 0, 0, 0, 0, 0, 0, 49407};
  want.resize(77, 0);
  EXPECT_EQ(sd2, want);
  EXPECT_EQ(tokenizer("clip").tokenize("! !! !!!"), (std::vector<int64_t>{256, 748, 995}));
}

TEST(CLIPTokenizer, CountsTheTokensTruncationDrops) {
  std::string words;
  for (int i = 0; i < 80; ++i) words += "cat ";
  const CLIPTokenizer& tok = tokenizer("clip");
  EXPECT_EQ(tok.encode(words, 77).dropped_tokens, 5);
  EXPECT_EQ(tok.encode(words, 77).ids.back(), tok.eos_id());
  EXPECT_EQ(tok.encode(words, 85).dropped_tokens, 0);
  EXPECT_EQ(tok.encode(words, 10).ids.size(), 10u);
  EXPECT_EQ(tok.encode(words, 10).dropped_tokens, 72);
  EXPECT_EQ(tok.encode("", 2).ids, (std::vector<int64_t>{49406, 49407}));
  EXPECT_EQ(tok.encode("cat", 2).dropped_tokens, 1);
}

TEST(CLIPTokenizer, RejectsInvalidUtf8NamingTheByte) {
  EXPECT_NE(encode_error("ab\xff").find("not valid utf-8 at byte 2 (0xff)"), std::string::npos) << encode_error("ab\xff");
  EXPECT_NE(encode_error("\x80").find("at byte 0"), std::string::npos);
  EXPECT_NE(encode_error("caf\xc3").find("at byte 3"), std::string::npos);          // truncated
  EXPECT_NE(encode_error("x\xc0\xafy").find("at byte 1"), std::string::npos);       // overlong '/'
  EXPECT_NE(encode_error("x\xed\xa0\x80").find("at byte 1"), std::string::npos);    // a surrogate
  EXPECT_NE(encode_error("\xf4\x90\x80\x80").find("at byte 0"), std::string::npos);  // past U+10FFFF
  EXPECT_EQ(encode_error("caf\xc3\xa9"), "(no error)");
}

TEST(CLIPTokenizer, RejectsAMaxLengthWithoutRoomForBosAndEos) {
  EXPECT_THROW(tokenizer("clip").encode("cat", 1), dpinfer::Error);
}

TEST(CLIPTokenizer, MissingVocabularyIsAClearError) {
  TempDir dir;
  dir.write("merges.txt", "#version: 0.2\n");
  std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find("cannot open tokenizer file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab.json"), std::string::npos) << msg;
  EXPECT_EQ(load_error(dir.path() + "/no-such-dir").find("cannot open tokenizer file"), 0u);

  TempDir no_merges;
  no_merges.write("vocab.json", "{}");
  EXPECT_NE(load_error(no_merges.path()).find("merges.txt"), std::string::npos);
}

TEST(CLIPTokenizer, MalformedJsonIsAClearError) {
  TempDir dir;
  write_minimal(dir);
  dir.write("vocab.json", "{\"a\": 1,");
  std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find("vocab.json' is not valid json"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  dir.write("vocab.json", R"({"a": "one"})");
  msg = load_error(dir.path());
  EXPECT_NE(msg.find("the id of token \"a\" must be an integer"), std::string::npos) << msg;

  dir.write("vocab.json", "[1, 2]");
  EXPECT_NE(load_error(dir.path()).find("expected an object"), std::string::npos);

  write_minimal(dir);
  dir.write("tokenizer_config.json", "{\"model_max_length\": 77");
  msg = load_error(dir.path());
  EXPECT_NE(msg.find("tokenizer_config.json' is not valid json"), std::string::npos) << msg;

  dir.write("tokenizer_config.json", R"({"pad_token": 5})");
  msg = load_error(dir.path());
  EXPECT_NE(msg.find("pad_token must be a string or an object"), std::string::npos) << msg;

  dir.write("tokenizer_config.json", R"({"model_max_length": "77"})");
  EXPECT_NE(load_error(dir.path()).find("model_max_length must be a number"), std::string::npos);

  dir.write("tokenizer_config.json", R"({"model_max_length": 1})");
  EXPECT_NE(load_error(dir.path()).find("at least 2"), std::string::npos);

  dir.write("tokenizer_config.json", R"({"truncation_side": "left"})");
  EXPECT_NE(load_error(dir.path()).find("truncation_side"), std::string::npos);

  dir.write("tokenizer_config.json", "{}");
  dir.write("special_tokens_map.json", "nope");
  EXPECT_NE(load_error(dir.path()).find("special_tokens_map.json' is not valid json"), std::string::npos);
}

TEST(CLIPTokenizer, ModelMaxLengthFallsBackTo77WhenUnbounded) {
  TempDir dir;
  write_minimal(dir);
  EXPECT_EQ(CLIPTokenizer::from_dir(dir.path()).model_max_length(), 77);  // no config at all
  dir.write("tokenizer_config.json", R"({"model_max_length": 1000000000000000019884624838656})");
  EXPECT_EQ(CLIPTokenizer::from_dir(dir.path()).model_max_length(), 77);
  dir.write("tokenizer_config.json", R"({"model_max_length": 4294967296})");
  EXPECT_EQ(CLIPTokenizer::from_dir(dir.path()).model_max_length(), 77);
  dir.write("tokenizer_config.json", R"({"model_max_length": null})");
  EXPECT_EQ(CLIPTokenizer::from_dir(dir.path()).model_max_length(), 77);
  dir.write("tokenizer_config.json", R"({"model_max_length": 248})");
  EXPECT_EQ(CLIPTokenizer::from_dir(dir.path() + "/").model_max_length(), 248);
}

TEST(CLIPTokenizer, SpecialTokensMapOverridesTheConfigAndUnknownPiecesBecomeUnk) {
  TempDir dir;
  write_minimal(dir);
  dir.write("tokenizer_config.json", R"({"pad_token": "<|startoftext|>"})");
  EXPECT_EQ(CLIPTokenizer::from_dir(dir.path()).pad_id(), 0);
  dir.write("special_tokens_map.json", R"({"pad_token": {"content": "<|endoftext|>"}})");
  CLIPTokenizer tok = CLIPTokenizer::from_dir(dir.path());
  EXPECT_EQ(tok.pad_id(), 1);
  // No byte symbols in this vocabulary: every piece is unk (<|endoftext|>, id 1).
  EXPECT_EQ(tok.tokenize("ab c"), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(tok.tokenize("<|startoftext|>"), (std::vector<int64_t>{0}));
}

TEST(CLIPTokenizer, IsSafeToShareBetweenThreads) {
  std::vector<std::string> prompts;
  std::vector<std::vector<int64_t>> want;
  for (const json& entry : corpus()["entries"]) {
    prompts.push_back(entry["prompt"].get<std::string>());
    want.push_back(entry["clip"]["input_ids"].get<std::vector<int64_t>>());
  }
  CLIPTokenizer fresh = CLIPTokenizer::from_dir(kDataDir + "/clip");  // an empty word cache
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < prompts.size(); ++i) {
        size_t k = (i * 7 + size_t(t) * 13) % prompts.size();
        if (fresh.encode(prompts[k], 77).ids != want[k]) ++mismatches[size_t(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(CLIPTokenizer, TokenizesTenThousandPromptsWellUnderASecond) {
  const CLIPTokenizer& tok = tokenizer("clip");
  std::vector<std::string> prompts;
  for (const json& entry : corpus()["entries"]) prompts.push_back(entry["prompt"].get<std::string>());
  auto start = std::chrono::steady_clock::now();
  size_t total = 0;
  for (size_t i = 0; i < 10000; ++i) {
    // Vary each prompt so that the word cache does not answer everything.
    std::string prompt = prompts[i % prompts.size()] + " seed" + std::to_string(i);
    total += tok.encode(prompt, 77).ids.size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(total, 10000u * 77u);
  EXPECT_LT(seconds, 1.0);
  std::printf("[          ] 10k prompts in %.3f s\n", seconds);
}

// The truncation warning quotes the prompt's first 60 bytes or so: io::utf8_prefix() cuts
// there without splitting a character, which a plain substr(0, 60) did for 'a' + 40 cats
// (1 + 4k bytes: the 15th cat spans bytes 57..60).
const std::string kCat = "\xF0\x9F\x90\x88";  // U+1F408 CAT, 4 bytes

std::string cats(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kCat;
  return out;
}

TEST(Utf8Prefix, CutsAtACodePointBoundary) {
  using dpinfer::io::find_invalid_utf8;
  using dpinfer::io::utf8_prefix;
  const std::string prompt = "a" + cats(40);
  ASSERT_NE(find_invalid_utf8(prompt.substr(0, 60)), std::string::npos);  // what substr did
  EXPECT_EQ(utf8_prefix(prompt, 60), "a" + cats(14));
  EXPECT_EQ(utf8_prefix(prompt, 61), "a" + cats(15));  // ends exactly at a boundary
  EXPECT_EQ(utf8_prefix(prompt, 57), "a" + cats(14));
  EXPECT_EQ(utf8_prefix(prompt, 3), "a");
  EXPECT_EQ(utf8_prefix(prompt, 0), "");
  EXPECT_EQ(utf8_prefix(prompt, 1000), prompt);  // shorter than the limit: whole
  EXPECT_EQ(utf8_prefix("", 60), "");
  EXPECT_EQ(utf8_prefix("caf\xC3\xA9!", 4), "caf");           // 2-byte é
  EXPECT_EQ(utf8_prefix("caf\xC3\xA9!", 5), "caf\xC3\xA9");
  EXPECT_EQ(utf8_prefix("\xE5\xAF\x8C\xE5\xA3\xAB", 5), "\xE5\xAF\x8C");  // 3-byte 富士
  for (size_t n = 0; n <= prompt.size() + 1; ++n) {
    const std::string_view cut = utf8_prefix(prompt, n);
    EXPECT_LE(cut.size(), n);
    EXPECT_GT(cut.size() + 4, std::min(n, prompt.size()));  // never more than one character short
    EXPECT_EQ(find_invalid_utf8(cut), std::string::npos) << n;
  }
}

TEST(CLIPTokenizer, TheTruncationWarningQuotesThePromptAsValidUtf8) {
  dpinfer::pipeline::LoadRequest o;
  o.model = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/tiny-sd1";
  auto pipe = dpinfer::pipeline::load_text_to_image(o);
  dpinfer::pipeline::ImageRequest r;
  r.prompt = "a" + cats(40);
  r.steps = 1;
  r.guidance_scale = 1.0;
  r.width = r.height = 64;
  std::vector<std::string> lines;
  dpinfer::log::set_redirect([&](const std::string& line) { lines.push_back(line); });
  try {
    pipe->generate({r});
  } catch (...) {
    dpinfer::log::set_redirect(nullptr);
    throw;
  }
  dpinfer::log::set_redirect(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(dpinfer::io::find_invalid_utf8(lines[0]), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("warning: the prompt 'a" + cats(14) + "' is too long for CLIP: "), std::string::npos)
      << lines[0];
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

// T5Tokenizer against transformers 4.57.6's T5TokenizerFast (and the slow T5Tokenizer) on a
// tiny SentencePiece Unigram model with T5's nmt_nfkc charsmap: the goldens in
// tests/data/tokenizer/t5_corpus.json and the folder tests/data/tokenizer/t5/ come from
// tools/fixtures/make_t5_tokenizer_goldens.py.
#include "dpinfer/pipeline/text/t5_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dpinfer/pipeline/text/tokenizer.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

using dpinfer::pipeline::Encoding;
using dpinfer::pipeline::Padding;
using dpinfer::pipeline::T5Tokenizer;
using nlohmann::json;

const std::string kDataDir = std::string(DPINFER_TEST_DATA_DIR) + "/tokenizer";

const json& corpus() {
  static const json doc = json::parse(dpinfer::test::read_file(kDataDir + "/t5_corpus.json"));
  return doc;
}

const T5Tokenizer& tokenizer() {
  static const T5Tokenizer tok = T5Tokenizer::from_dir(kDataDir + "/t5");
  return tok;
}

std::string show(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return "[" + out + "]";
}

// Where T5TokenizerFast (HF tokenizers) and sentencepiece itself disagree, and dpinfer,
// built on sentencepiece, gives the slow T5Tokenizer's ids (see t5_tokenizer.h):
//   punct/18         "1,000,000": two equal-score Unigram segmentations of "000", tie broken
//                    differently;
//   accent_mixed/01  "a" + U+0300 + U+0301: the charsmap leaves the second mark, sentencepiece
//                    makes it <unk>, tokenizers drops it;
//   accent_mixed/03  "o" + U+0308 + U+0304: tokenizers normalises the whole grapheme to a piece,
//                    sentencepiece gives <unk>.
const std::set<std::string> kFollowsSlow = {"punct/18", "accent_mixed/01", "accent_mixed/03"};

std::vector<int64_t> ids_of(const json& j) { return j.get<std::vector<int64_t>>(); }

TEST(T5Tokenizer, LoadsTheFolder) {
  const T5Tokenizer& tok = tokenizer();
  EXPECT_EQ(tok.vocab_size(), corpus()["vocab_size"].get<size_t>());
  EXPECT_EQ(tok.pad_id(), corpus()["pad_id"].get<int64_t>());
  EXPECT_EQ(tok.eos_id(), corpus()["eos_id"].get<int64_t>());
  EXPECT_EQ(tok.unk_id(), corpus()["unk_id"].get<int64_t>());
  EXPECT_EQ(tok.model_max_length(), corpus()["model_max_length"].get<int>());
  ASSERT_EQ(tok.special_tokens().size(), 3u);
  EXPECT_EQ(tok.special_tokens()[0].token, "</s>");
  EXPECT_EQ(tok.special_tokens()[1].token, "<pad>");
  EXPECT_EQ(tok.special_tokens()[2].token, "<unk>");
}

// Every prompt: padded to max_length and truncated, its mask, and the untruncated ids.
TEST(T5Tokenizer, MatchesTransformersOnTheCorpus) {
  const T5Tokenizer& tok = tokenizer();
  const int max_length = corpus()["max_length"].get<int>();
  size_t checked = 0, slow_differs = 0, truncated = 0;
  for (const json& e : corpus()["entries"]) {
    const std::string name = e["name"].get<std::string>();
    const std::string prompt = e["prompt"].get<std::string>();
    const bool slow = kFollowsSlow.count(name) != 0;
    if (slow) {
      ASSERT_TRUE(e.contains("slow_ids")) << name << ": fast and slow agree there now";
    }
    const std::vector<int64_t> want = ids_of(slow ? e["slow_input_ids"] : e["input_ids"]);
    const std::vector<int64_t> want_all = ids_of(slow ? e["slow_ids"] : e["ids"]);

    const Encoding got = tok.encode(prompt, max_length);
    EXPECT_EQ(got.ids, want) << name << " " << json(prompt).dump() << "\n  got    " << show(got.ids)
                             << "\n  wanted " << show(want);
    // The mask: ones over the kept ids (the slow tokenizer's, where followed), zeros over padding.
    std::vector<int64_t> want_mask = ids_of(e["attention_mask"]);
    if (slow) {
      want_mask.assign(size_t(max_length), 0);
      std::fill_n(want_mask.begin(), std::min<size_t>(want_all.size(), size_t(max_length)), 1);
    }
    EXPECT_EQ(got.attention_mask, want_mask) << name;
    const Encoding all = tok.encode_unpadded(prompt, 1 << 20);
    EXPECT_EQ(all.ids, want_all) << name << " untruncated\n  got    " << show(all.ids) << "\n  wanted "
                                 << show(want_all);
    const int64_t dropped = std::max<int64_t>(0, int64_t(want_all.size()) - max_length);
    EXPECT_EQ(got.dropped_tokens, dropped) << name;
    truncated += dropped > 0;
    slow_differs += e.contains("slow_ids");
    ++checked;
  }
  EXPECT_GE(checked, 300u);
  EXPECT_GE(truncated, 8u) << "the long/ entries test truncation";
  // kFollowsSlow, plus three where the slow tokenizer does not append </s> after a text
  // that already ends in </s> (T5Tokenizer._add_eos_if_not_present); the fast one, followed
  // here, always appends it.
  EXPECT_EQ(slow_differs, 6u);
}

TEST(T5Tokenizer, BatchPadsToMaxLength) {
  const T5Tokenizer& tok = tokenizer();
  std::vector<Encoding> batch = tok.encode_batch({"a cat", "a photo of a cat in front of a house"}, 16,
                                                 Padding::kMaxLength);
  ASSERT_EQ(batch.size(), 2u);
  for (const Encoding& e : batch) EXPECT_EQ(e.ids.size(), 16u);
  EXPECT_EQ(batch[0].ids, tok.encode("a cat", 16).ids);
  EXPECT_EQ(batch[1].ids, tok.encode("a photo of a cat in front of a house", 16).ids);
}

TEST(T5Tokenizer, TruncationKeepsEos) {
  const T5Tokenizer& tok = tokenizer();
  const Encoding e = tok.encode("word word word word word", 3);
  ASSERT_EQ(e.ids.size(), 3u);
  EXPECT_EQ(e.ids.back(), tok.eos_id());
  EXPECT_EQ(e.dropped_tokens, int64_t(tok.tokenize("word word word word word").size()) - 2);
  const Encoding one = tok.encode("a cat", 1);
  EXPECT_EQ(one.ids, std::vector<int64_t>{tok.eos_id()});
  EXPECT_THROW(tok.encode("a cat", 0), dpinfer::Error);
}

TEST(T5Tokenizer, ThreadSafe) {
  const T5Tokenizer& tok = tokenizer();
  const std::vector<int64_t> want = tok.encode("一只猫坐在桌子上 <extra_id_3> café ﬁne", 64).ids;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) ok[size_t(t)] += tok.encode("一只猫坐在桌子上 <extra_id_3> café ﬁne", 64).ids == want;
    });
  }
  for (std::thread& th : threads) th.join();
  for (int n : ok) EXPECT_EQ(n, 200);
}

TEST(T5Tokenizer, RejectsInvalidUtf8) {
  try {
    tokenizer().encode("a \xff cat", 16);
    FAIL() << "no error";
  } catch (const dpinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid utf-8 at byte 2"), std::string::npos) << e.what();
  }
}

std::string load_error(const std::string& dir) {
  try {
    T5Tokenizer::from_dir(dir);
  } catch (const dpinfer::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A folder with tokenizer.json but no spiece.model is refused in one line naming the file.
TEST(T5Tokenizer, TokenizerJsonAloneSaysWhatIsMissing) {
  dpinfer::test::TempDir dir;
  dpinfer::test::write_file(dir.file("tokenizer.json"), dpinfer::test::read_file(kDataDir + "/t5/tokenizer.json"));
  const std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find("has tokenizer.json but no spiece.model"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(T5Tokenizer, BadFilesNameTheFile) {
  dpinfer::test::TempDir empty;
  EXPECT_NE(load_error(empty.path()).find("spiece.model"), std::string::npos) << load_error(empty.path());

  dpinfer::test::TempDir garbage;
  dpinfer::test::write_file(garbage.file("spiece.model"), "this is not a protobuf \x01\x02\x03");
  const std::string msg = load_error(garbage.path());
  EXPECT_NE(msg.find("is not a SentencePiece model"), std::string::npos) << msg;

  dpinfer::test::TempDir bad_config;
  dpinfer::test::write_file(bad_config.file("spiece.model"),
                            dpinfer::test::read_file(kDataDir + "/t5/spiece.model"));
  dpinfer::test::write_file(bad_config.file("tokenizer_config.json"), R"({"extra_ids": "many"})");
  const std::string msg2 = load_error(bad_config.path());
  EXPECT_NE(msg2.find("extra_ids must be an integer"), std::string::npos) << msg2;
}

// Without tokenizer_config.json: T5Tokenizer's defaults, 100 extra ids past the pieces.
TEST(T5Tokenizer, DefaultsWithoutConfig) {
  dpinfer::test::TempDir dir;
  dpinfer::test::write_file(dir.file("spiece.model"), dpinfer::test::read_file(kDataDir + "/t5/spiece.model"));
  const T5Tokenizer plain = T5Tokenizer::from_dir(dir.path());
  const T5Tokenizer& tok = tokenizer();
  EXPECT_EQ(plain.vocab_size(), tok.vocab_size());
  EXPECT_EQ(plain.model_max_length(), T5Tokenizer::kDefaultModelMaxLength);
  for (const json& e : corpus()["entries"]) {
    const std::string prompt = e["prompt"].get<std::string>();
    EXPECT_EQ(plain.encode(prompt, 64).ids, tok.encode(prompt, 64).ids) << e["name"];
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

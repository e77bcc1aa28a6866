// PromptEmbeddingCache (pipeline/families/prompt_embedding_cache.h): each distinct text of a
// call encoded once, an entry per call (or per text, each()), hits identical to misses, the LRU bound
// on entries and bytes, a two-phase chunk's pinned entries; and through the tiny SD and SDXL
// pipelines, an image whose prompts were cached is the image a fresh pipeline makes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <functional>
#include <string>
#include <vector>

#include "dpinfer/pipeline/families/prompt_embedding_cache.h"
#include "dpinfer/pipeline/load.h"

using dpinfer::pipeline::PromptEmbeddingCache;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;

/// A stand-in text encoder: text t gives [4, 3] and [2] tensors filled from std::hash(t),
/// and every call is logged.
struct FakeEncoder {
  std::vector<std::vector<std::string>> calls;
  PromptEmbeddingCache::Encoder fn() {
    return [this](const std::vector<std::string>& texts) {
      calls.push_back(texts);
      std::vector<at::Tensor> hidden, pooled;
      for (const std::string& t : texts) {
        const double v = static_cast<double>(std::hash<std::string>{}(t) % 1000) / 7.0;
        hidden.push_back(at::arange(12, at::kFloat).view({4, 3}) + v);
        pooled.push_back(at::full({2}, -v, at::kFloat));
      }
      return std::vector<at::Tensor>{at::stack(hidden), at::stack(pooled)};
    };
  }
  static at::Tensor hidden_of(const std::string& t) {
    const double v = static_cast<double>(std::hash<std::string>{}(t) % 1000) / 7.0;
    return at::arange(12, at::kFloat).view({4, 3}) + v;
  }
};


TEST(PromptEmbeddingCache, EachDistinctTextOfACallIsEncodedOnceAndHitsEqualMisses) {
  PromptEmbeddingCache cache(8);
  FakeEncoder enc;
  auto first = cache.rows({"ugly", "a cat", "ugly", "ugly"}, "k", enc.fn());
  ASSERT_EQ(enc.calls.size(), 1u);
  EXPECT_EQ(enc.calls[0], (std::vector<std::string>{"ugly", "a cat"})) << "distinct, in order";
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].sizes(), (std::vector<int64_t>{4, 4, 3}));
  EXPECT_EQ(first[1].sizes(), (std::vector<int64_t>{4, 2}));
  EXPECT_TRUE(at::equal(first[0][0], FakeEncoder::hidden_of("ugly")));
  EXPECT_TRUE(at::equal(first[0][1], FakeEncoder::hidden_of("a cat")));
  EXPECT_TRUE(at::equal(first[0][2], first[0][0]));
  EXPECT_EQ(cache.misses(), 2);
  EXPECT_EQ(cache.hits(), 0);

  // The same distinct texts in the same order (another batch of one negative prompt, or the
  // same batch again): one hit, the very rows the miss gave.
  auto again = cache.rows({"ugly", "ugly", "a cat"}, "k", enc.fn());
  EXPECT_EQ(enc.calls.size(), 1u);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_TRUE(at::equal(again[0][1], first[0][0]));
  EXPECT_TRUE(at::equal(again[1][2], first[1][1]));

  // Other texts beside one seen before: encoded together, as this batch's own call would,
  // not stitched from another call's rows (which round otherwise in half precision).
  auto second = cache.rows({"a dog", "ugly"}, "k", enc.fn());
  ASSERT_EQ(enc.calls.size(), 2u);
  EXPECT_EQ(enc.calls[1], (std::vector<std::string>{"a dog", "ugly"}));
  EXPECT_TRUE(at::equal(second[0][1], first[0][0]));  // the fake encoder rounds alike

  // What the caller does to a result (SDXL zeroes rows) leaves the cache alone.
  second[0].zero_();
  auto third = cache.rows({"a dog", "ugly"}, "k", enc.fn());
  EXPECT_EQ(enc.calls.size(), 2u);
  EXPECT_TRUE(at::equal(third[0][1], FakeEncoder::hidden_of("ugly")));

  // Another key (another clip_skip, or side) is another entry.
  cache.rows({"ugly", "a cat"}, "k2", enc.fn());
  ASSERT_EQ(enc.calls.size(), 3u);
  EXPECT_EQ(enc.calls[2], (std::vector<std::string>{"ugly", "a cat"}));
  // Lists whose texts run together alike are not one entry.
  cache.rows({"ab", "c"}, "k", enc.fn());
  cache.rows({"a", "bc"}, "k", enc.fn());
  EXPECT_EQ(enc.calls.size(), 5u);
}

TEST(PromptEmbeddingCache, TheLeastRecentlyUsedEntryGoesAndTheBoundHolds) {
  PromptEmbeddingCache cache(3);
  FakeEncoder enc;
  cache.rows({"a"}, "k", enc.fn());
  cache.rows({"b"}, "k", enc.fn());
  cache.rows({"c"}, "k", enc.fn());
  EXPECT_EQ(cache.size(), 3u);
  cache.rows({"a"}, "k", enc.fn());  // a is now the most recent; b the least
  cache.rows({"d"}, "k", enc.fn());  // b goes
  EXPECT_EQ(cache.size(), 3u);
  const size_t calls = enc.calls.size();
  for (const char* t : {"a", "c", "d"}) cache.rows({t}, "k", enc.fn());
  EXPECT_EQ(enc.calls.size(), calls) << "a, c and d stayed";
  cache.rows({"b"}, "k", enc.fn());
  ASSERT_EQ(enc.calls.size(), calls + 1) << "b was dropped";
  for (int i = 0; i < 50; ++i) cache.rows({"x" + std::to_string(i), "y" + std::to_string(i)}, "k", enc.fn());
  EXPECT_EQ(cache.size(), 3u);
  // A batch of more distinct texts than the bound still gets all its rows.
  auto big = cache.rows({"p", "q", "r", "s", "t"}, "k", enc.fn());
  EXPECT_EQ(big[0].size(0), 5);
  EXPECT_TRUE(at::equal(big[0][4], FakeEncoder::hidden_of("t")));
  EXPECT_EQ(cache.size(), 3u);

  PromptEmbeddingCache none(0);
  none.rows({"a", "a"}, "k", enc.fn());
  none.rows({"a"}, "k", enc.fn());
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.misses(), 2) << "no entries kept, but one encoding per distinct text of a call";
}

// The families that encode one text per call (FLUX.1, Chroma, Qwen-Image): an entry per text, so a
// text seen in any batch before is a hit beside new ones, each text encoded alone and once.
TEST(PromptEmbeddingCache, EachTextOfACallIsItsOwnEntry) {
  PromptEmbeddingCache cache(8);
  std::vector<std::string> encoded;
  const PromptEmbeddingCache::EncodeOne one = [&](const std::string& t) {
    encoded.push_back(t);
    return std::vector<at::Tensor>{FakeEncoder::hidden_of(t).unsqueeze(0)};  // [1, 4, 3]
  };
  auto first = cache.each({"ugly", "a cat", "ugly"}, "k", one);
  EXPECT_EQ(encoded, (std::vector<std::string>{"ugly", "a cat"}));
  ASSERT_EQ(first.size(), 3u);
  EXPECT_TRUE(at::equal(first[2][0], first[0][0]));
  first[0][0].zero_();  // the caller's copy
  auto second = cache.each({"a dog", "ugly"}, "k", one);
  EXPECT_EQ(encoded, (std::vector<std::string>{"ugly", "a cat", "a dog"})) << "ugly was a hit beside a new text";
  EXPECT_TRUE(at::equal(second[1][0][0], FakeEncoder::hidden_of("ugly")));
  cache.each({"ugly"}, "k2", one);
  EXPECT_EQ(encoded.size(), 4u) << "another key is another entry";
  EXPECT_EQ(cache.misses(), 4);
}

// Two-phase chunks: what a chunk encodes stays until the next chunk begins, past the bound on
// entries and on bytes; then the bound applies to it again, least recently used first.
TEST(PromptEmbeddingCache, AChunksEntriesArePinnedUntilTheNextChunk) {
  const size_t entry_bytes = 4 * 4 * 3 + 4 * 2;  // [1, 4, 3] and [1, 2] float32
  PromptEmbeddingCache cache(2, 3 * entry_bytes);
  FakeEncoder enc;
  cache.begin_chunk();
  for (const char* t : {"a", "b", "c", "d", "e"}) cache.rows({t}, "k", enc.fn());
  cache.end_chunk();
  EXPECT_EQ(cache.size(), 5u);
  EXPECT_EQ(cache.pinned(), 5u);
  EXPECT_EQ(cache.bytes(), 5 * entry_bytes);
  for (const char* t : {"a", "b", "c", "d", "e"}) cache.rows({t}, "k", enc.fn());
  EXPECT_EQ(enc.calls.size(), 5u) << "every text of the chunk found";
  cache.rows({"f"}, "k", enc.fn());  // not pinned: the bound holds for it alone
  EXPECT_EQ(cache.size(), 6u);
  cache.begin_chunk();  // the last chunk's entries are ordinary ones again: 2 stay, the most recent
  EXPECT_EQ(cache.pinned(), 0u);
  EXPECT_EQ(cache.size(), 2u);
  const size_t calls = enc.calls.size();
  cache.rows({"f"}, "k", enc.fn());
  cache.rows({"e"}, "k", enc.fn());
  EXPECT_EQ(enc.calls.size(), calls);
  cache.end_chunk();

  PromptEmbeddingCache small(8, entry_bytes);  // the bytes bind before the count
  small.rows({"a"}, "k", enc.fn());
  small.rows({"b"}, "k", enc.fn());
  EXPECT_EQ(small.size(), 1u);
  EXPECT_EQ(small.bytes(), entry_bytes);
}

// Through the pipelines: the second call finds every prompt and negative prompt cached,
// and its images are those of a pipeline that encoded them afresh (every byte).
TEST(PromptEmbeddingCache, CachedPromptsGiveTheSameImagesInTheTinyPipelines) {
  for (const char* model : {"tiny-sd1", "tiny-sdxl"}) {
    dpinfer::pipeline::LoadRequest o;
    o.model = kData + "/pipelines/" + model;
    std::vector<dpinfer::pipeline::ImageRequest> batch;
    for (int i = 0; i < 3; ++i) {
      dpinfer::pipeline::ImageRequest r;
      r.prompt = i == 1 ? "a red fox in the snow" : "a lighthouse at dusk";
      r.negative_prompt = "blurry, low quality";
      r.seed = static_cast<uint64_t>(10 + i);
      r.steps = 2;
      r.guidance_scale = 5.0;
      r.width = r.height = 32;
      r.settings = {{"clip_skip", 0}, {"guidance_rescale", 0.0}, {"eta", 0.0}};
      batch.push_back(r);
    }
    auto warm = dpinfer::pipeline::load_text_to_image(o);
    warm->generate(batch);  // fills its cache
    auto cached = warm->generate(batch);
    auto fresh = dpinfer::pipeline::load_text_to_image(o)->generate(batch);
    ASSERT_EQ(cached.size(), fresh.size());
    for (size_t k = 0; k < cached.size(); ++k)
      EXPECT_EQ(cached[k].pixels, fresh[k].pixels) << model << " image " << k;
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace

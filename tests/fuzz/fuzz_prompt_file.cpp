// libFuzzer: io::parse_prompts on .txt and .jsonl content, then the items made from it
// (plan::ItemList, both --seed-from modes). The first byte picks the format and the
// seed mode; the rest is the file.
#include <cstdint>
#include <string>

#include "dpinfer/io/prompt_file.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

namespace {

void check_item(const plan::ItemList& items, int64_t index) {
  const plan::Item it = items.at(index);
  if (it.index != index || it.seed < 0 || it.image < 0 || it.prompt != items.prompt_of(index)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string content(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool jsonl = mode & 1;
  try {
    auto specs = io::parse_prompts(content, jsonl ? "fuzz.jsonl" : "fuzz.txt", jsonl);
    plan::ItemDefaults d;
    d.seed_from = mode & 2 ? plan::SeedFrom::kPrompt : plan::SeedFrom::kIndex;
    // A base seed near the top now and then, where seed + index would overflow.
    d.seed = mode & 4 ? INT64_MAX - (mode >> 3) : mode >> 3;
    const plan::ItemList items(std::move(specs), d);
    if (!items.empty()) {
      check_item(items, 0);
      check_item(items, items.size() / 2);
      check_item(items, items.size() - 1);
    }
  } catch (const InputError& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

// libFuzzer: io::parse_prompts on .txt, .jsonl, .csv and .tsv content, with and without
// --keep-fields, then the items made from it (plan::ItemList, both --seed-from modes).
// The first byte picks the format and the seed mode, the second --keep-fields and the
// CSV/TSV prompt column; the rest is the file.
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
  if (size < 2) return 0;
  const uint8_t mode = data[0], table = data[1];
  const std::string content(reinterpret_cast<const char*>(data) + 2, size - 2);
  // Bit 0: JSONL; with bit 7: CSV (bit 0 clear) or TSV (bit 0 set).
  const io::PromptFormat format = mode & 0x80 ? (mode & 1 ? io::PromptFormat::kTsv : io::PromptFormat::kCsv)
                                  : mode & 1  ? io::PromptFormat::kJsonl
                                              : io::PromptFormat::kText;
  io::PromptFileOptions options;
  options.keep_fields = table & 1;
  options.prompt_column = table & 2 ? "caption" : "prompt";
  options.reserved_field = [](const std::string& k) { return k == "status"; };
  try {
    auto specs = io::parse_prompts(content, "fuzz.file", format, options);
    for (const io::PromptSpec& s : specs)
      if (!s.fields.is_object() || (!options.keep_fields && !s.fields.empty()) || s.fields.contains("status"))
        std::abort();
    plan::ItemDefaults d;
    d.seed_from = mode & 2 ? plan::SeedFrom::kPrompt : plan::SeedFrom::kIndex;
    // A base seed near the top now and then, where seed + index would overflow.
    d.seed = mode & 4 ? INT64_MAX - ((mode >> 3) & 15) : (mode >> 3) & 15;
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

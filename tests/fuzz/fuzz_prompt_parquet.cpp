// libFuzzer: a parquet prompts file (issue 27) read as `dpinfer generate prompts.parquet` reads it:
// io::read_prompt_parquet, through io/parquet.cpp's dlopen of the parquet module and the module's
// conversion of Arrow's table (src/io/parquet/parquet_module.cpp), then the items made from it.
// The first byte picks --keep-fields, the CSV prompt column and the seed mode; the rest is the
// file. Every bad file must be one bounded line (InputError) naming the file, and for a bad
// value its row and column, never a crash.
//
// Instrumented: this harness, io/ and plan/ (ASan, UBSan, coverage), and the parquet module,
// compiled again here with clang (tests/fuzz/CMakeLists.txt, dpinfer_fuzz_parquet). Not
// instrumented: libarrow and libparquet from the pyarrow wheel, which the module links as they
// ship (ASan still checks their heap through its malloc, and a crash inside them is found).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dpinfer/io/parquet.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The instrumented module, not an installed one (io/parquet.cpp reads the variable first).
  ::setenv("DPINFER_PARQUET_MODULE", DPINFER_FUZZ_PARQUET_MODULE, 1);
  std::string why;
  if (!io::parquet_support(&why)) {
    std::fprintf(stderr, "fuzz_prompt_parquet: no parquet support: %s\n", why.c_str());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("prompts.parquet");
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string& path = file.write(data + 1, size - 1);
  io::PromptFileOptions options;
  options.keep_fields = mode & 1;
  options.prompt_column = mode & 2 ? "caption" : "prompt";
  options.reserved_field = [](const std::string& k) { return k == "status"; };
  try {
    auto specs = io::read_prompt_parquet(path, options);
    for (const io::PromptSpec& s : specs)
      if (!s.fields.is_object() || (!options.keep_fields && !s.fields.empty()) || s.fields.contains("status"))
        std::abort();
    plan::ItemDefaults d;
    d.seed_from = mode & 4 ? plan::SeedFrom::kPrompt : plan::SeedFrom::kIndex;
    const plan::ItemList items(std::move(specs), d);
    if (!items.empty()) {
      const plan::Item last = items.at(items.size() - 1);
      if (last.index != items.size() - 1 || last.prompt != items.prompt_of(last.index)) std::abort();
    }
  } catch (const InputError& e) {
    fuzz::check_message(e.what());
    // It names the file (quoted, as every prompts error does).
    if (std::string(e.what()).find(path) == std::string::npos) {
      std::fprintf(stderr, "the message does not name the file: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}

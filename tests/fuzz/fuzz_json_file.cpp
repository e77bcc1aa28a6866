// libFuzzer: io::parse_json_text in both dialects, with and without unique keys, the
// file reader behind model_index.json and every config (io::read_json_object_file), and
// io::json_brief on whatever parses, and a LoRA file's lora_adapter_metadata reader
// (pipeline/loading/lora_adapter_metadata.h) on the same text. The first byte picks the mode; the
// rest is the text.
#include <cstdint>
#include <string>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/python_json.h"
#include "dpinfer/pipeline/loading/lora_adapter_metadata.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("model_index.json");
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto dialect = mode & 1 ? io::JsonDialect::kPython : io::JsonDialect::kStrict;
  try {
    const nlohmann::json value = io::parse_json_text(text, dialect, (mode & 2) != 0);
    const size_t limit = 1 + (mode >> 3) * 4;  // 1..125
    const std::string brief = io::json_brief(value, limit);
    if (brief.size() > 4 * limit + 16 + 3) std::abort();
    fuzz::check_message(brief);
    if (value.is_object())
      for (const auto& [key, v] : value.items()) (void)io::python_json_number(v);
  } catch (const io::JsonSyntaxError& e) {
    fuzz::check_message(e.what());
  }
  try {
    const auto metadata = pipeline::LoraAdapterMetadata::parse(text, "lora.safetensors");
    for (const char* module : {"proj_out", "transformer_blocks.0.attn.to_q", "a.b"}) {
      const pipeline::LoraLayerScale s = metadata.scale_of("transformer", module);
      if (s.rank < 1) std::abort();
    }
  } catch (const InputError& e) {
    fuzz::check_message(e.what());
  }
  if (mode & 4) {  // the file path: reading, parsing, and the messages that name the file
    try {
      (void)io::read_json_object_file(file.write(text.data(), text.size()));
    } catch (const Error& e) {
      fuzz::check_message(e.what());
    }
  }
  return 0;
}

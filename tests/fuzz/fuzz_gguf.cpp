// libFuzzer: io::GgufFile::open on a file of arbitrary bytes. With the first byte even, the rest
// is the file as it is. With it odd, the harness writes GGUF's magic and version 3 in front of
// the rest, so the fuzzer reaches the counts, metadata and tensor infos without guessing them.
#include <cstdint>
#include <string>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("model.gguf");
  if (size == 0) return 0;
  std::string bytes;
  if (data[0] & 1) bytes.assign("GGUF\x03\0\0\0", 8);
  bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    auto gguf = io::GgufFile::open(file.write(bytes.data(), bytes.size()));
    // What open() promises: every tensor's data lies inside the file, and find() finds it.
    for (const io::GgufTensor& t : gguf->tensors()) {
      if (t.offset + t.nbytes > gguf->file_size() || t.numel() < 0) std::abort();
      // Offsets are aligned from the start of the data, which is aligned itself.
      if (t.offset % gguf->alignment() != 0) std::abort();
      if (t.nbytes) {
        volatile std::byte first = t.data[0], last = t.data[t.nbytes - 1];
        (void)first, (void)last;
      }
      if (gguf->find(t.name) != &t) std::abort();
      (void)t.byte_shape();
      (void)io::ggml_type_name(t.type);
    }
    for (const auto& [key, value] : gguf->metadata()) (void)value.as_uint();
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}

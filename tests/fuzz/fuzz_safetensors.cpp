// libFuzzer: io::SafetensorsFile::open on a file of arbitrary bytes. With the first
// byte even, the rest is the file as it is. With it odd, the rest is a JSON header that
// the harness frames (its 8-byte length in front, then data[1] & 63 zero bytes of data),
// so the fuzzer reaches the header's rules without having to guess the length.
#include <cstdint>
#include <string>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("model.safetensors");
  if (size == 0) return 0;
  std::string bytes;
  if (data[0] & 1) {
    if (size < 2) return 0;
    const std::string header(reinterpret_cast<const char*>(data) + 2, size - 2);
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
    bytes += header;
    bytes.append(data[1] & 63, '\0');
  } else {
    bytes.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  }
  try {
    auto st = io::SafetensorsFile::open(file.write(bytes.data(), bytes.size()));
    // What open() promises: every view lies inside the file, in data order.
    size_t end = 0;
    for (const io::TensorView& t : st->tensors()) {
      if (t.offset < end || t.offset + t.nbytes > st->file_size() || t.numel() < 0) std::abort();
      if (t.nbytes) {
        volatile std::byte first = t.data[0], last = t.data[t.nbytes - 1];
        (void)first, (void)last;
      }
      if (st->find(t.name) != &t) std::abort();
      end = t.offset + t.nbytes;
    }
  } catch (const Error& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}
